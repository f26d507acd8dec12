"""bind_arguments: the check every tool call passes before its handler runs."""

from __future__ import annotations

import re
from typing import Any

import pytest

from herald.runtime.toolset import default_registry
from herald.tools import Tool, ToolError
from herald.tools.arguments import bind_arguments


def _noop(args: dict[str, Any], ctx: Any) -> None:
    return None


EXAMPLE = Tool(
    name="example",
    description="A tool with one parameter of each kind bind_arguments checks.",
    parameters={
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            "ratio": {"type": "number", "minimum": 0},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
            "flag": {"type": "boolean", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}},
            "maybe": {"type": ["string", "null"]},
        },
        "required": ["name"],
    },
    handler=_noop,
)


def bind(args: Any, **kwargs: Any) -> dict[str, Any]:
    return bind_arguments(EXAMPLE, args, **kwargs)


def test_defaults_are_filled_and_missing_optionals_are_none() -> None:
    assert bind({"name": "x"}) == {
        "name": "x",
        "count": 3,
        "ratio": None,
        "mode": "fast",
        "flag": False,
        "tags": None,
        "maybe": None,
    }


def test_given_values_are_kept() -> None:
    bound = bind({"name": "x", "count": 7, "ratio": 0.5, "mode": "slow", "flag": True, "tags": ["a"]})
    assert (bound["count"], bound["ratio"], bound["mode"], bound["flag"], bound["tags"]) == (
        7,
        0.5,
        "slow",
        True,
        ["a"],
    )


def test_none_for_an_optional_argument_means_its_default() -> None:
    assert bind({"name": "x", "count": None, "mode": None})["count"] == 3
    assert bind({"name": "x", "mode": None})["mode"] == "fast"


def test_unknown_argument_is_named_and_accepted_ones_listed() -> None:
    with pytest.raises(ToolError) as info:
        bind({"name": "x", "colour": "red"})
    message = str(info.value)
    assert "example" in message and "'colour'" in message
    assert "Accepted: name, count, ratio, mode, flag, tags, maybe." in message


def test_missing_required_argument() -> None:
    with pytest.raises(ToolError, match=r"missing required argument 'name' \(string\)"):
        bind({"count": 2})


def test_wrong_type_names_argument_expected_type_and_value() -> None:
    with pytest.raises(ToolError, match=r"argument 'count' must be integer, got str '5'"):
        bind({"name": "x", "count": "5"})
    with pytest.raises(ToolError, match=r"argument 'name' must be string, got int 5"):
        bind({"name": 5})


def test_bool_is_not_accepted_as_integer_or_number() -> None:
    with pytest.raises(ToolError, match="'count' must be integer, got bool True"):
        bind({"name": "x", "count": True})
    with pytest.raises(ToolError, match="'ratio' must be number, got bool False"):
        bind({"name": "x", "ratio": False})


def test_integral_float_is_accepted_as_integer_but_fraction_is_not() -> None:
    bound = bind({"name": "x", "count": 4.0})
    assert bound["count"] == 4 and isinstance(bound["count"], int)
    with pytest.raises(ToolError, match="'count' must be integer"):
        bind({"name": "x", "count": 4.5})


def test_integer_is_a_number() -> None:
    assert bind({"name": "x", "ratio": 2})["ratio"] == 2


def test_enum() -> None:
    with pytest.raises(ToolError, match=r"argument 'mode' must be one of 'fast', 'slow', got 'medium'"):
        bind({"name": "x", "mode": "medium"})


def test_minimum_and_maximum() -> None:
    with pytest.raises(ToolError, match="'count' must be at least 1, got 0"):
        bind({"name": "x", "count": 0})
    with pytest.raises(ToolError, match="'count' must be at most 10, got 11"):
        bind({"name": "x", "count": 11})
    with pytest.raises(ToolError, match=re.escape("'ratio' must be at least 0, got -0.5")):
        bind({"name": "x", "ratio": -0.5})
    assert bind({"name": "x", "count": 1})["count"] == 1
    assert bind({"name": "x", "count": 10})["count"] == 10


def test_array_items_are_checked() -> None:
    with pytest.raises(ToolError, match=r"argument 'tags\[1\]' must be string, got int 2"):
        bind({"name": "x", "tags": ["a", 2]})


def test_nullable_type_accepts_none_and_its_type_only() -> None:
    assert bind({"name": "x", "maybe": "y"})["maybe"] == "y"
    with pytest.raises(ToolError, match="'maybe' must be string or null, got int 1"):
        bind({"name": "x", "maybe": 1})


def test_none_for_a_required_argument_is_a_type_error() -> None:
    with pytest.raises(ToolError, match="'name' must be string, got NoneType None"):
        bind({"name": None})


def test_arguments_must_be_an_object() -> None:
    with pytest.raises(ToolError, match="arguments must be an object of named values, got list"):
        bind(["x"])
    with pytest.raises(ToolError, match="missing required argument 'name'"):
        bind(None)


def test_long_values_are_cut_in_the_message() -> None:
    with pytest.raises(ToolError) as info:
        bind({"name": "x", "count": "9" * 500})
    assert len(str(info.value)) < 200


def test_script_refused_arguments_only_refused_in_scripts() -> None:
    terminal = default_registry().get("terminal")
    assert terminal is not None
    with pytest.raises(ToolError) as info:
        bind_arguments(terminal, {"command": "ls", "background": True}, in_script=True)
    assert str(info.value).startswith("terminal: scripts run commands in the foreground only")
    assert "'background'" in str(info.value)
    # A direct call may start a server in the background; pty it does not know at all.
    assert bind_arguments(terminal, {"command": "ls", "background": True})["background"] is True
    with pytest.raises(ToolError, match=r"unknown argument\(s\) 'pty'"):
        bind_arguments(terminal, {"command": "ls", "pty": True})


def test_real_tool_defaults() -> None:
    registry = default_registry()
    read_file = registry.get("read_file")
    search = registry.get("search_files")
    assert read_file is not None and search is not None
    assert bind_arguments(read_file, {"path": "a"}) == {"path": "a", "offset": 1, "limit": 500}
    assert bind_arguments(search, {"pattern": "x"}) == {
        "pattern": "x",
        "path": ".",
        "target": "content",
        "file_glob": None,
        "limit": 50,
        "offset": 0,
        "timeout": 120.0,
    }
    with pytest.raises(ToolError, match="'offset' must be at least 1, got 0"):
        bind_arguments(read_file, {"path": "a", "offset": 0})
    with pytest.raises(ToolError, match="'target' must be one of 'content', 'files', got 'dirs'"):
        bind_arguments(search, {"pattern": "x", "target": "dirs"})
