"""Generate the sandbox's `hermes_tools` module from the tools' schemas.

`hermes_tools.py` gets one function per script-callable tool, with a typed signature and a
docstring taken from the tool's schema, plus the helpers (`parallel`, `json_parse`,
`shell_quote`, `retry`, `transaction`) and `ToolError`. It imports only the stdlib and the private package
`_hermes_runtime` beside it (herald/_sandbox, laid out by runtime/sandbox/sandboxdir.py), and
must import in any Python >= 3.8.
"""

from __future__ import annotations

import keyword
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

from . import returns as result_types
from .registry import Tool

HELPERS = ["parallel", "json_parse", "shell_quote", "retry", "transaction"]
RUNTIME_PACKAGE = "_hermes_runtime"
# Names the generated module defines itself: a tool by one of these names would replace it.
RESERVED = frozenset(
    [*HELPERS, "ToolError", "ConnectionLost", "Any", "Dict", "List", "Literal", "Optional", "TypedDict", "Union",
     "_call", "_ELSEWHERE", "_importing"]
)

_PY_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "List[Any]",
    "object": "Dict[str, Any]",
}


def _annotation(schema: dict[str, Any]) -> str:
    kinds = schema.get("type", [])
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if not kinds and isinstance(schema.get("anyOf"), list):  # Optional[X] as JSON schema tools write it
        options = [o for o in schema["anyOf"] if isinstance(o, dict)]
        kinds = [o.get("type") for o in options if isinstance(o.get("type"), str)]
        if len(kinds) != len(options):
            return "Any"
    names = [_PY_TYPES[k] for k in kinds if k in _PY_TYPES]
    items = schema.get("items")
    if "List[Any]" in names and isinstance(items, dict) and isinstance(items.get("type"), str):
        names[names.index("List[Any]")] = f"List[{_annotation(items)}]"  # List[str], List[Dict[str, Any]]
    if not names:
        return "Any"
    base = names[0] if len(names) == 1 else f"Union[{', '.join(names)}]"
    return f"Optional[{base}]" if "null" in kinds else base


def _signature(tool: Tool) -> tuple[str, list[str]]:
    if not tool.name.isidentifier() or keyword.iskeyword(tool.name) or tool.name in RESERVED:
        raise ValueError(
            f"tool {tool.name!r} cannot be called from scripts: its name must be a Python "
            f"identifier other than a keyword or one of {', '.join(sorted(RESERVED))}"
        )
    params: list[str] = []
    names: list[str] = []
    # What scripts may not pass is not in their signature: it reaches `**refused` and is refused.
    props = {name: schema for name, schema in tool.properties.items() if name not in tool.script_refused_args}
    ordered = [n for n in props if n in tool.required] + [n for n in props if n not in tool.required]
    for name in ordered:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"tool {tool.name}: parameter {name!r} is not a Python identifier")
        if name == "_call" or (name == "refused" and tool.script_refused_args):
            raise ValueError(f"tool {tool.name}: parameter name {name!r} clashes with the generated stub")
        schema = props[name]
        annotation = _annotation(schema)
        if name in tool.required:
            params.append(f"{name}: {annotation}")
        else:
            default = schema.get("default")
            if default is None and not annotation.startswith("Optional[") and annotation != "Any":
                annotation = f"Optional[{annotation}]"
            params.append(f"{name}: {annotation} = {default!r}")
        names.append(name)
    if tool.script_refused_args:
        params.append("**refused: Any")
    return ", ".join(params), names


def _docstring(tool: Tool) -> str:
    parts = [tool.description.strip()]
    args = []
    for name, schema in tool.properties.items():
        if name in tool.script_refused_args:
            continue
        text = schema.get("description", "")
        if "enum" in schema:
            text = (text + " " if text else "") + "One of: " + ", ".join(map(repr, schema["enum"])) + "."
        args.append(f"    {name}: {text}".rstrip())
    if args:
        parts.append("Args:\n" + "\n".join(args))
    if tool.returns_shape:
        parts.append(f"Returns:\n    {tool.returns_shape}")
    parts.append("Raises ToolError with a message saying what went wrong and what to do next.")
    body = "\n\n".join(parts).replace('"""', "'''").replace("\\", "\\\\")
    return textwrap.indent(body, "    ")


def _return_annotation(tool: Tool) -> str:
    typed = tool.returns
    if typed is not None:
        return result_types.annotation(typed)
    return _annotation(tool.output_schema) if tool.output_schema else "Any"


def render_stub(tool: Tool) -> str:
    signature, names = _signature(tool)
    args = ", ".join(f"{n!r}: {n}" for n in names)
    extra = "\n    args.update(refused)" if tool.script_refused_args else ""
    returns = _return_annotation(tool)
    return (
        f"def {tool.name}({signature}) -> {returns}:\n"
        f'    """\n{_docstring(tool)}\n    """\n'
        f"    args = {{{args}}}{extra}\n"
        f"    return _call({tool.name!r}, args)\n"
    )


_MISSING_NAME = '''

_ELSEWHERE = {elsewhere!r}


def __getattr__(name: str) -> Any:
    # `from hermes_tools import x` for a tool this script cannot call: say why, and what it can.
    # Plain attribute access (hasattr) gets the AttributeError it expects; only an import
    # statement gets the ImportError that carries the explanation.
    if name.startswith("_"):
        raise AttributeError("module 'hermes_tools' has no attribute %r" % name)
    why = _ELSEWHERE.get(name)
    what = "Tool %r %s." % (name, why) if why else "hermes_tools has no tool or helper named %r." % name
    message = "%s Tools this script can call: %s. Helpers: %s." % (what, {tools!r}, {helpers!r})
    if _importing():
        raise ImportError(message, name="hermes_tools")
    raise AttributeError(message)


def _importing() -> bool:
    import opcode
    import sys

    frame = sys._getframe(2)
    code, at = frame.f_code.co_code, frame.f_lasti
    return 0 <= at < len(code) and code[at] == opcode.opmap.get("IMPORT_FROM", -1)
'''


def render_module(tools: Iterable[Tool], elsewhere: Mapping[str, str] | None = None) -> str:
    """The module's source. `elsewhere` maps tools the script cannot call to why, e.g.
    {"web_search": "is not enabled in this session"}, for the error of importing one."""
    tools = list(tools)
    exported = [t.name for t in tools] + HELPERS + ["ToolError", "ConnectionLost"]
    header = (
        '"""Herald tools for this script, generated for this session; every call is an RPC to\n'
        "the Herald process, which runs the tool on the session's backend.\n\n"
        f"Tools: {', '.join(t.name for t in tools) or '(none)'}\n"
        f"Helpers: {', '.join(HELPERS)}\n"
        '"""\n\n'
        "from typing import Any, Dict, List, Literal, Optional, TypedDict, Union\n\n"
        f"from {RUNTIME_PACKAGE}.child.client import ConnectionLost, ToolError\n"
        f"from {RUNTIME_PACKAGE}.child.client import call as _call\n"
        f"from {RUNTIME_PACKAGE}.child.helpers import {', '.join(HELPERS)}\n\n"
        f"__all__ = {exported!r}\n"
    )
    missing = _MISSING_NAME.format(
        elsewhere=dict(sorted((elsewhere or {}).items())),
        tools=", ".join(t.name for t in tools) or "none",
        helpers=", ".join(HELPERS),
    )
    return header + missing + result_classes(tools) + "".join("\n\n" + render_stub(t) for t in tools)


def result_classes(tools: Iterable[Tool]) -> str:
    """The TypedDicts the tools return, defined before the stubs that name them. A class named
    like a tool or a name the module defines would replace it: an error, as for tools."""
    typed = [tool.returns for tool in tools if tool.returns is not None]
    source = result_types.stub_classes(typed)
    names = {tool.name for tool in tools} | RESERVED
    for line in source.splitlines():
        if line.startswith("class "):
            name = line[len("class "):].split("(", 1)[0]
            if name in names:
                raise ValueError(f"a tool's result type is named {name}, which the stub module already uses: rename it")
    return source


def signatures(tools: Iterable[Tool]) -> list[str]:
    """One `name(params) -> type` line per tool as scripts see them (for prompts and the CLI);
    no `-> type` when the tool declares none."""
    lines = []
    for tool in tools:
        annotation = _return_annotation(tool)
        lines.append(f"{tool.name}({_signature(tool)[0]})" + (f" -> {annotation}" if annotation != "Any" else ""))
    return lines
