"""What every tool call shares, here and inside a backend: the error a tool raises, the check of
a call's arguments against the tool's JSON schema, and the preview of arguments for the
transcript.

Stdlib only, Python >= 3.8 (the sandbox package): Herald's dispatcher binds every call with
`bind_arguments` (through herald/tools/arguments.py), and in backend mode the supervisor binds
the calls it runs next to the script with the same function, from the schemas in its grant, so
a bad call gets the same message either way.

Only the schema subset tools use is checked (types, required, enum, minimum/maximum, items, no
unknown names); the messages name the tool, the argument and what was expected, so a model can
fix the call in one go.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

PREVIEW_CHARS = 200


class ToolError(Exception):
    """A tool failed in a way the caller can act on; the message says how."""

    def __init__(self, message: str, error_type: str = "ToolError") -> None:
        super().__init__(message)
        self.error_type = error_type


_TYPES: Dict[str, Tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}

# A schema "type" -> the one Python type whose values it takes as they are (bool is not an integer).
_EXACT: Dict[Any, type] = {"string": str, "integer": int, "boolean": bool, "object": dict}


def bind_arguments(
    name: str,
    props: Mapping[str, Any],
    required: Sequence[str],
    args: Any,
    refused: Mapping[str, str],
) -> Dict[str, Any]:
    """`args` checked against the schema's `props` and `required`, with defaults filled in.
    `refused` maps arguments the caller may not pass (inside scripts) to the reason."""
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolError("%s: arguments must be an object of named values, got %s" % (name, type(args).__name__))
    refusing = [arg for arg in args if arg in refused]
    if refusing:
        raise ToolError("%s: %s" % (name, refused[refusing[0]]))
    unknown = [arg for arg in args if arg not in props]
    if unknown:
        raise ToolError(
            "%s: unknown argument(s) %s. Accepted: %s."
            % (name, ", ".join(map(repr, unknown)), ", ".join(props) or "none")
        )
    bound: Dict[str, Any] = {}
    for arg, schema in props.items():
        if arg in args and not (args[arg] is None and arg not in required):
            bound[arg] = _check(name, arg, args[arg], schema)
        elif arg in required:
            raise ToolError("%s: missing required argument '%s' (%s)." % (name, arg, _describe(schema)))
        else:
            bound[arg] = schema.get("default")
    return bound


def _describe(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    return str(kind)


def _check(tool: str, name: str, value: Any, schema: Mapping[str, Any]) -> Any:
    kinds = schema.get("type")
    if type(kinds) is str and _EXACT.get(kinds) is type(value):
        pass  # the usual case: one type named, a value of exactly that type
    elif kinds is not None:
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
                "%s: argument '%s' must be %s, got %s %s."
                % (tool, name, _describe(schema), type(value).__name__, "{!r:.80}".format(value))
            )
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError(
            "%s: argument '%s' must be %s, got %s." % (tool, name, _describe(schema), "{!r:.80}".format(value))
        )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolError("%s: argument '%s' must be at least %s, got %s." % (tool, name, schema["minimum"], value))
        if "maximum" in schema and value > schema["maximum"]:
            raise ToolError("%s: argument '%s' must be at most %s, got %s." % (tool, name, schema["maximum"], value))
    if isinstance(value, (list, tuple)) and "items" in schema:
        value = [_check(tool, "%s[%d]" % (name, i), item, schema["items"]) for i, item in enumerate(value)]
    return value


def preview(value: Any, limit: int = PREVIEW_CHARS) -> Any:
    """A small, JSON-safe stand-in for `value` for logs: long strings and lists are cut."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "… ({:,} chars)".format(len(value))
    if isinstance(value, dict):
        return {str(k): preview(v, limit) for k, v in list(value.items())[:20]}
    if isinstance(value, (list, tuple)):
        items: List[Any] = [preview(v, limit) for v in value[:10]]
        return [*items, "… (%d items)" % len(value)] if len(value) > 10 else items
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return preview(repr(value), limit)
