"""Check a call's arguments against the tool's JSON schema and fill in defaults.

Only the schema subset tools use is checked (types, required, enum, minimum/maximum, no unknown
names); the messages name the tool, the argument and what was expected, so a model can fix the
call in one go.
"""

from __future__ import annotations

from typing import Any

from .registry import Tool, ToolError

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def bind_arguments(tool: Tool, args: Any, *, in_script: bool = False) -> dict[str, Any]:
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolError(f"{tool.name}: arguments must be an object of named values, got {type(args).__name__}")
    props = tool.properties
    if in_script:
        refused = [name for name in args if name in tool.script_refused_args]
        if refused:
            raise ToolError(f"{tool.name}: {tool.script_refused_args[refused[0]]}")
    unknown = [name for name in args if name not in props]
    if unknown:
        raise ToolError(
            f"{tool.name}: unknown argument(s) {', '.join(map(repr, unknown))}. "
            f"Accepted: {', '.join(props) or 'none'}."
        )
    bound: dict[str, Any] = {}
    for name, schema in props.items():
        if name in args and not (args[name] is None and name not in tool.required):
            bound[name] = _check(tool.name, name, args[name], schema)
        elif name in tool.required:
            raise ToolError(f"{tool.name}: missing required argument '{name}' ({_describe(schema)}).")
        else:
            bound[name] = schema.get("default")
    return bound


def _describe(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    return str(kind)


def _check(tool: str, name: str, value: Any, schema: dict[str, Any]) -> Any:
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        ok = False
        for kind in kinds:
            expected = _TYPES.get(kind, (object,))
            if isinstance(value, bool) and kind in ("integer", "number"):
                continue
            if kind == "integer" and isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, expected):
                ok = True
                break
        if not ok:
            raise ToolError(
                f"{tool}: argument '{name}' must be {_describe(schema)}, got {type(value).__name__} {value!r:.80}."
            )
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError(f"{tool}: argument '{name}' must be {_describe(schema)}, got {value!r:.80}.")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolError(f"{tool}: argument '{name}' must be at least {schema['minimum']}, got {value}.")
        if "maximum" in schema and value > schema["maximum"]:
            raise ToolError(f"{tool}: argument '{name}' must be at most {schema['maximum']}, got {value}.")
    if isinstance(value, list | tuple) and "items" in schema:
        value = [_check(tool, f"{name}[{i}]", item, schema["items"]) for i, item in enumerate(value)]
    return value
