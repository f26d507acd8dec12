"""The execute_code tool: how a model runs a script on a session's Runtime.

`execute_code_tool(runtime)` makes it for one Runtime: its handler runs the script there and
returns the ExecutionResult as a dict (`Tool.runs_scripts` says what that means to the agent and
the dispatcher). The description is generated from the offer of script tools (the same
`signatures` the sandbox stubs are written from), so it always lists the functions a script can
really call, with the limits that apply.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..config import Settings
from ..tools.context import ToolContext
from ..tools.registry import Tool, function_schema
from ..tools.resources import ANY_FILE, BROWSER, SANDBOX, SHELL, fixed
from ..tools.stubgen import HELPERS, signatures
from .dispatcher import Dispatcher
from .sandbox.result import ExecutionResult


class ScriptRunner(Protocol):
    """What execute_code needs of a Runtime: its settings, its dispatcher, a run."""

    settings: Settings
    dispatcher: Dispatcher

    def execute(self, code: str) -> ExecutionResult: ...

EXECUTE_CODE = "execute_code"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "description": "The Python script. Print what you want to see."},
    },
    "required": ["code"],
}


def execute_code_description(script_tools: list[Tool], settings: Settings, policy: str = "") -> str:
    """The description; `policy` is the session's `Policy.describe` (what its profile forbids)."""
    limits = settings.sandbox
    lines = []
    for tool, signature in zip(script_tools, signatures(script_tools), strict=True):
        summary = tool.description.strip().splitlines()[0]
        lines.append(
            f"  {signature}\n      {summary}" + (f" Returns {tool.returns_shape}." if tool.returns_shape else "")
        )
    stubs = "\n".join(lines) or "  (no tools are enabled for scripts in this session)"
    return (
        "Run a Python 3 script in a sandboxed interpreter. It imports Herald's tools as plain "
        "functions and every call runs the real tool on the workspace; only what the script prints "
        "comes back to you, so one script can replace dozens of tool calls.\n\n"
        "from hermes_tools import " + ", ".join([t.name for t in script_tools] + HELPERS) + "\n\n"
        "Functions (each returns a dict; a failure raises hermes_tools.ToolError whose message says what to do):\n"
        f"{stubs}\n"
        "Helpers: parallel(*calls) runs calls concurrently (each a zero-argument callable or a "
        "(function, *args) tuple; results in call order); json_parse(text) parses JSON leniently; "
        "shell_quote(value) quotes for the shell; retry(fn, *args, attempts=3) retries on ToolError; "
        "`with transaction(verify=\"pytest -q\") as tx:` keeps the block's changes to the workspace (file "
        "tools, terminal, open() alike) only if it does not raise and verify (optional) exits 0, else undoes "
        "them all; then tx.committed, tx.changed, tx.verify (exit_code, output's tail), tx.reason.\n\n"
        "Use a script when the work takes more than two or three calls: many files, bulk edits, "
        "paging through results (next_offset), reading and cross-referencing, loops, filtering, "
        "anything whose next step depends on a previous result. Do not use one for a single quick "
        "look at a file or one search: call that tool directly.\n"
        "Print compact summaries (counts, paths, the lines that matter), not whole files.\n\n"
        f"Limits: {limits.timeout:g} s per script (then the whole process tree is killed), "
        f"{limits.max_tool_calls} tool calls per script, {limits.max_parallel_calls} concurrent calls, "
        f"stdout kept up to {limits.max_stdout_bytes:,} bytes (head and tail; the full text is saved "
        "to a file whose path is returned). Act on the workspace through these functions.\n"
        + (f"{policy} A refused call raises ToolError (type PolicyRefused) saying why.\n" if policy else "")
        + "Returns: {status: success|error|timeout|interrupted, output, error, exit_code, "
        "tool_calls_made, refused_calls (calls refused by the call limit, a budget or the policy: the "
        "script's work is incomplete when it is not 0), budget_exhausted, duration_seconds, output_spill_path, ...}."
    )


def execute_code_tool(runtime: ScriptRunner) -> Tool:
    """execute_code bound to `runtime`: it runs the script there (runs are serialised and
    interrupted by the Runtime) and returns `ExecutionResult.to_dict()`."""

    def handler(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return runtime.execute(args["code"]).to_dict()

    return Tool(
        name=EXECUTE_CODE,
        description=execute_code_description(runtime.dispatcher.script_tools, runtime.settings, policy_text(runtime)),
        parameters=PARAMETERS,
        handler=handler,
        sandbox=False,
        # A script may use the shell, the browser and any file: the agent runs no other call of
        # the turn beside it. (The dispatcher holds none of these: the script's calls lock their own.)
        touches=fixed(SANDBOX, SHELL, BROWSER, ANY_FILE),
        mutates=True,
        refunds_turn=True,
        runs_scripts=True,
    )


def policy_text(runtime: ScriptRunner) -> str:
    dispatcher = runtime.dispatcher
    return dispatcher.policy.describe(dispatcher.tools, dispatcher.gate.described_roots())


def execute_code_schema(script_tools: list[Tool], settings: Settings, policy: str = "") -> dict[str, Any]:
    """The schema execute_code_tool's tool has, without a Runtime (for `herald tools --json`)."""
    return function_schema(EXECUTE_CODE, execute_code_description(script_tools, settings, policy), PARAMETERS)
