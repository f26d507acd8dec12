"""What a tool returns, declared once as a `TypedDict` beside the tool (`Tool.returns`), and the
two ways it is shown: one line for a model's prompt, the schemas and `herald tools`
(`shape`: `{'path': str, 'next_offset'?: int, ...}`), and class definitions for the generated
`hermes_tools` module (`stub_classes`), which must import in any Python >= 3.8: `List`, `Dict`,
`Optional`, `Union`, `Literal` from typing, and optional keys by a `total=False` subclass.

A field may carry a hint for the reader with `Annotated[str, "numbered lines"]`: the line shows
it, the stub keeps the bare type. Optional keys are the `NotRequired[...]` ones (or every key
of a `total=False` class).
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

_SIMPLE = {str: "str", int: "int", float: "float", bool: "bool", type(None): "None", Any: "Any"}


def is_typed_dict(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, dict) and hasattr(value, "__required_keys__")


# A result type is fixed once its class is made, and many tools share one (every MCP tool's):
# each is read once, not once per tool and per rendering (20,000 MCP tools took seconds).
@functools.cache
def fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type with its hints, required) for each key of the TypedDict `cls`, in order."""
    hints = get_type_hints(cls, include_extras=True)
    total: frozenset[str] = cls.__required_keys__  # type: ignore[attr-defined]  # a TypedDict class
    found = []
    for name, hint in hints.items():
        # Under `from __future__ import annotations` the class cannot see NotRequired in its
        # string annotations (its __required_keys__ are wrong): the resolved hint says it.
        marker = get_origin(hint)
        if marker in (typing.NotRequired, typing.Required):
            found.append((name, get_args(hint)[0], marker is typing.Required))
        else:
            found.append((name, hint, name in total))
    return tuple(found)


@functools.cache
def shape(returns: type | None) -> str:
    """The one-line form of what a tool returns ('' when it says nothing)."""
    return "" if returns is None else _shape(returns)


def schema_shape(schema: dict[str, Any]) -> str:
    """One line on a result declared by a JSON schema (an MCP tool's outputSchema)."""
    keys = list((schema.get("properties") or {}).keys())
    return "a dict: {" + ", ".join(keys) + "}" if keys else "the tool's structured result"


def _shape(tp: Any) -> str:
    hint = ""
    if get_origin(tp) is typing.Annotated:
        tp, *extras = get_args(tp)
        hint = " (" + "; ".join(str(e) for e in extras) + ")"
    if is_typed_dict(tp):
        parts = [f"{name!r}{'' if required else '?'}: {_shape(field)}" for name, field, required in fields(tp)]
        return "{" + ", ".join(parts) + "}" + hint
    origin, args = get_origin(tp), get_args(tp)
    if origin is list:
        return f"[{_shape(args[0])}]" + hint
    if origin is dict:
        return f"{{{_shape(args[0])}: {_shape(args[1])}}}" + hint
    if origin is Literal:
        return "|".join(repr(a) for a in args) + hint
    if origin in (Union, types.UnionType):
        return " | ".join(_shape(a) for a in args) + hint
    return _SIMPLE.get(tp, getattr(tp, "__name__", str(tp))) + hint


def annotation(tp: Any) -> str:
    """`tp` as Python 3.8 source (typing names; TypedDicts by their class name)."""
    if get_origin(tp) is typing.Annotated:
        return annotation(get_args(tp)[0])
    if is_typed_dict(tp):
        return str(tp.__name__)
    origin, args = get_origin(tp), get_args(tp)
    if origin is list:
        return f"List[{annotation(args[0])}]"
    if origin is dict:
        return f"Dict[{annotation(args[0])}, {annotation(args[1])}]"
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        inner = annotation(rest[0]) if len(rest) == 1 else f"Union[{', '.join(annotation(a) for a in rest)}]"
        return f"Optional[{inner}]" if len(rest) < len(args) else inner
    if tp in _SIMPLE:
        return _SIMPLE[tp]
    raise ValueError(f"a tool's result type uses {tp!r}, which the generated stubs cannot spell")


def stub_classes(roots: Iterable[type]) -> str:
    """Source of every TypedDict the `roots` need, each defined before it is used, each once;
    two different classes of one name are an error (the stub module has one namespace)."""
    ordered: dict[str, type] = {}

    def visit(cls: type) -> None:
        known = ordered.get(cls.__name__)
        if known is cls:
            return
        if known is not None:
            raise ValueError(f"two result types are named {cls.__name__}: rename one")
        for _, field, _ in fields(cls):
            for inner in _nested(field):
                visit(inner)
        ordered[cls.__name__] = cls

    for root in roots:
        visit(root)
    return "".join(_class_source(cls) for cls in ordered.values())


def _nested(tp: Any) -> list[type]:
    if is_typed_dict(tp):
        return [tp]
    return [inner for arg in get_args(tp) for inner in _nested(arg)]


def _class_source(cls: type) -> str:
    name = cls.__name__
    keys = fields(cls)
    doc = (cls.__doc__ or "").strip().replace("\\", "\\\\").replace('"""', "'''")
    doc_line = f'    """{doc}"""\n' if doc else ""

    def body(selected: list[tuple[str, Any, bool]]) -> str:
        return "".join(f"    {key}: {annotation(field)}\n" for key, field, _ in selected) or "    pass\n"

    required = [k for k in keys if k[2]]
    optional = [k for k in keys if not k[2]]
    if not optional:
        return f"\n\nclass {name}(TypedDict):\n{doc_line}{body(required)}"
    if not required:
        return f"\n\nclass {name}(TypedDict, total=False):\n{doc_line}{body(optional)}"
    # Python 3.8 has no NotRequired: the required keys in a base, the optional ones beside them.
    return (f"\n\nclass _{name}Keys(TypedDict):\n{body(required)}"
            f"\n\nclass {name}(_{name}Keys, total=False):\n{doc_line}{body(optional)}")
