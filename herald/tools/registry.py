"""The one tool type and the registry every tool surface is generated from.

A `Tool` is data plus a handler `(args, ctx) -> JSON-able result`. From the registry come the
LLM's function schemas, the sandbox's `hermes_tools` stubs, `herald tools` and the docs. Handlers
raise `ToolError` with a message that tells the model what to do next; that message reaches the
model (direct calls) or the script (as an exception) unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Raised by the tools here and by the sandbox's tool core (one class: a backend-mode supervisor
# raises it too).
from .._sandbox.toolcore.base import ToolError as ToolError
from ..config import Settings
from .context import ToolContext
from .resources import ANY_FILE, Resource, ResourceFn
from .returns import is_typed_dict, schema_shape, shape

Handler = Callable[[dict[str, Any], ToolContext], Any]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of an object
    handler: Handler
    # What a call returns: a TypedDict defined beside the tool (tools/returns.py renders it for
    # the prompt, the schemas, `herald tools` and the stubs); None: the tool says nothing.
    returns: type | None = None
    # JSON schema of the result when the tool declares one (MCP's outputSchema): the stub's return type.
    output_schema: dict[str, Any] | None = None
    sandbox: bool = True  # callable from execute_code scripts
    # What a call touches (files, the shell, the browser, tool-wide state): calls that touch the
    # same thing take turns (see tools/resources.py). None: nothing shared, runs alongside anything.
    touches: ResourceFn | None = None
    mutates: bool = False  # changes files, processes or remote state (permission profiles)
    # Changes the agent's own state, not the workspace (todo's list): no mutation for permission
    # profiles, but a call may change what a later call sees, so it is not `read_only` either.
    changes_agent_state: bool = False
    # The agent does not charge a model turn whose only call is this tool (execute_code).
    refunds_turn: bool = False
    # Runs the model's script (its `code` argument) in the sandbox and returns
    # ExecutionResult.to_dict(): the agent shows the script and counts its calls, the dispatcher
    # takes no locks for it (the script's own calls lock what they touch) and refuses it from
    # inside a script (no nested sandboxes). execute_code is the one such tool.
    runs_scripts: bool = False
    # Arguments a script may not pass, with the reason given to the script.
    script_refused_args: Mapping[str, str] = field(default_factory=dict)
    # Why this tool cannot work with these settings (no provider key, no browser), or None when it
    # can. An unavailable tool is not offered to the model unless the session names it explicitly.
    unavailable: Callable[[Settings], str | None] | None = None
    # Work the tool's first call would otherwise wait for (start a browser, import a stack), done
    # ahead on a daemon thread once per session when the session is likely to call the tool
    # (runtime/offer.py ToolWarmer says when); errors are logged, and the first call does the work.
    # Tools sharing one hook share one warm-up.
    warm: Callable[[ToolContext], None] | None = None

    def unavailable_reason(self, settings: Settings) -> str | None:
        """None when the tool can work in a session with `settings`, else the reason it cannot."""
        if self.unavailable is None:
            return None
        try:
            return self.unavailable(settings)
        except Exception as exc:  # a broken check must not hide the tool without saying why
            return f"its availability check failed: {type(exc).__name__}: {exc}"

    def resources(self, args: dict[str, Any], ctx: ToolContext) -> list[Resource]:
        """What a call with `args` touches. Arguments too broken to tell (the call will fail
        anyway) count as everything the tool could touch: the tool's state and every file."""
        if self.touches is None:
            return []
        try:
            return list(self.touches(args, ctx))
        except Exception:
            return [Resource(f"tool:{self.name}"), Resource(ANY_FILE)]

    @property
    def returns_shape(self) -> str:
        """One line on what a call returns ('' when the tool does not say)."""
        if self.returns is not None:
            return shape(self.returns)
        return schema_shape(self.output_schema) if self.output_schema else ""

    @property
    def read_only(self) -> bool:
        """A successful call changed nothing a later call sees: the loop guard may then count
        identical results of identical calls as no progress."""
        return not (self.mutates or self.changes_agent_state)

    def __post_init__(self) -> None:
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name}: parameters must be a JSON schema of type object")
        missing = set(self.parameters.get("required", [])) - set(self.properties)
        if missing:
            raise ValueError(f"tool {self.name}: required parameters {sorted(missing)} are not defined")
        if self.returns is not None and not is_typed_dict(self.returns):
            raise ValueError(f"tool {self.name}: returns must be a TypedDict class")
        if self.runs_scripts and (self.sandbox or "code" not in self.required):
            # Caught here, at definition, rather than as a nested sandbox or a view without a script.
            raise ValueError(f"tool {self.name}: a tool that runs scripts needs sandbox=False and a required 'code'")

    @property
    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = self.parameters.get("properties", {})
        return props

    @property
    def required(self) -> list[str]:
        req: list[str] = self.parameters.get("required", [])
        return req

    def llm_schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema the model sees."""
        return function_schema(self.name, self.description, self.parameters, self.returns_shape)


def function_schema(name: str, description: str, parameters: dict[str, Any], returns: str = "") -> dict[str, Any]:
    """An OpenAI-style function schema; `Tool.llm_schema`, and the one a tool that needs a live
    session would have, for callers without a session (`herald tools --json`)."""
    text = description + (f"\nReturns: {returns}" if returns else "")
    return {"type": "function", "function": {"name": name, "description": text, "parameters": parameters}}


class Registry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __iter__(self) -> Any:
        return iter(self._tools[name] for name in self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def select(self, enabled: Iterable[str] | None) -> list[Tool]:
        """The enabled tools (all when `enabled` is None); unknown names are an error."""
        if enabled is None:
            return list(self)
        wanted = list(dict.fromkeys(enabled))
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise ValueError(
                f"unknown tool(s): {', '.join(unknown)}. Known tools: {', '.join(self.names())}"
            )
        return [self._tools[n] for n in sorted(wanted)]

    def sandbox_tools(self, enabled: Iterable[str] | None) -> list[Tool]:
        """What a script may call: sandbox tools intersected with the session's enabled tools."""
        return [t for t in self.select(enabled) if t.sandbox]
