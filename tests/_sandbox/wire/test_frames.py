"""The wire contract (herald/_sandbox/wire/frames.py, wire.py, grant.py): each channel's guard takes the frames
Herald's writers send and refuses what a script (or a broken peer) could forge instead, so a
reader never acts on a frame that is not one of its channel's."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from herald._sandbox.beside.taken import take_grant
from herald._sandbox.wire import frames
from herald._sandbox.wire import guards as wire
from herald._sandbox.wire.framing import ProtocolError
from herald._sandbox.wire.grant import GrantError, ToolSpec, tool_specs

SPEC = {"properties": {"path": {"type": "string"}}, "required": ["path"], "refused": {}, "writes": False}
FILES = {"read_max_bytes": 1000, "read_max_line_chars": 100, "read_max_chars": 1000}


def test_control_pipe_takes_a_childs_frames_and_nothing_else() -> None:
    for good in ({"type": "ready", "pid": 7}, {"type": "done", "exit_code": 0}, {"type": "leaving"},
                 {"type": "exit", "exit_code": 3},
                 {"type": "record", "tool": "read_file", "args": {}, "duration_ms": 0.5, "reply_bytes": 9}):
        assert wire.from_child(dict(good)) == good
    forged: Any
    for forged in (
        {"type": "exit", "exit_code": "0"},  # a status that is not a number
        {"type": "exit", "exit_code": True},  # a bool is not a status
        {"type": "done"},  # its status missing
        {"type": "start", "mode": "oneshot"},  # Herald's frame, the other way
        {"type": "record", "tool": "read_file", "duration_ms": 1, "reply_bytes": 1, "error": {"message": "x"}},
        {"id": 1, "tool": "read_file", "args": {}},  # a call has no place on the control pipe
        [], "exit", None,
    ):
        with pytest.raises(wire.FrameError):
            wire.from_child(forged)


def test_a_frame_error_is_a_protocol_error() -> None:
    # Readers that close a link on a bad frame (client.py, relay.py) close it on these too.
    with pytest.raises(ProtocolError):
        wire.to_client({"type": "exit", "exit_code": 0})


def test_exec_channel_tells_calls_from_tagged_frames() -> None:
    call = {"id": 3, "tool": "read_file", "args": {"path": "a"}, "conn": 2}
    relayed: dict[str, Any] = dict(wire.from_supervisor(dict(call)))
    assert "type" not in relayed
    output: dict[str, Any] = dict(wire.from_supervisor({"type": "out", "data": "x"}))
    assert output["type"] == frames.OUT
    with pytest.raises(wire.FrameError):
        wire.from_supervisor({"id": 3, "args": {}})  # untagged but no tool: not a call
    with pytest.raises(wire.FrameError):
        wire.from_supervisor({"type": "prepare", "env": {}, "loader": "x"})  # Herald's, the other way
    reply = wire.to_supervisor({"id": 3, "result": 1, "conn": 2})
    assert "type" not in reply and reply["conn"] == 2
    with pytest.raises(wire.FrameError):
        wire.to_supervisor({"id": 3, "result": 1})  # a reply that names no connection
    with pytest.raises(wire.FrameError):
        wire.to_supervisor({"type": "kill", "grace": "soon"})


def test_a_reply_is_a_result_or_an_error_with_its_words_on_both_ends() -> None:
    # What a script's client (to_client) and a supervisor relaying to it (to_supervisor) accept.
    good: list[dict[str, Any]] = [
        {"id": 1, "result": None},
        {"id": 2, "result": {"content": "x"}},
        {"id": 3, "error": {"type": "PolicyRefused", "message": "refused", "rule": "deny terminal"}},
        {"id": None, "error": {"type": "InflightLimit", "message": "too big"}},  # a frame refused unread
    ]
    for reply in good:
        assert wire.to_client(dict(reply)) == reply
        assert wire.to_supervisor(dict(reply, conn=5)) == dict(reply, conn=5)
    forged: Any
    for forged in (
        {"id": 1},  # neither a result nor an error
        {"result": 1},  # no id
        {"id": True, "result": 1},  # a bool is no call's id
        {"id": [1], "result": 1},
        {"id": 1, "error": "boom"},  # an error is an object
        {"id": 1, "error": {"message": "no type"}},
        {"id": 1, "error": {"type": "ToolError"}},  # nothing to say to the script
        {"id": 1, "error": {"type": 7, "message": "x"}},
        {"id": 1, "result": 1, "error": {"type": "ToolError", "message": "both"}},
    ):
        with pytest.raises(wire.FrameError):
            wire.to_client(forged)
        with pytest.raises(wire.FrameError):
            wire.to_supervisor(dict(forged, conn=5))


def test_relayed_calls_keep_only_what_a_call_is_made_of() -> None:
    relayed = wire.relayed_call(
        {"id": 1, "tool": "read_file", "args": {}, "conn": 99, "past_budget": True, "ran": {}}, 4
    )
    assert relayed == {"id": 1, "tool": "read_file", "args": {}, "conn": 4}
    for forged in ({"type": "record", "id": 1}, {"id": [1]}, {"id": True, "tool": "x"}, {"tool": "x"}):
        with pytest.raises(wire.FrameError):
            wire.relayed_call(forged, 4)


def test_fork_socket_ops_round_trip_and_refuse_garbage() -> None:
    fork: frames.ForkOp = {"op": frames.FORK, "sandbox_dir": "/tmp/x"}
    assert wire.encode_op(fork) == json.dumps(fork).encode()  # the bytes as before the contract
    assert wire.to_zygote(wire.encode_op(fork)) == fork
    assert wire.from_zygote(b'{"op": "exit", "pid": 5, "status": -9}')["op"] == frames.EXIT
    for garbage in (
        b"\xff",
        b"[]",
        b'{"op": "reap"}',
        b'{"op": "fork", "sandbox_dir": 1}',
        b'{"op": "forked", "pid": 1}',
    ):
        with pytest.raises(wire.FrameError):
            wire.to_zygote(garbage)


def _grant(**changes: Any) -> dict[str, Any]:
    grant = {"allowed": ["read_file"], "local": ["read_file"], "max_calls": 2, "cwd": "/", "files": dict(FILES)}
    grant.update(changes)
    return grant


def test_a_grant_is_taken_only_whole() -> None:
    specs = tool_specs({"read_file": SPEC})
    taken = take_grant(_grant(roots={"write": [], "read": ["/srv/"]}), specs)
    assert taken["local"] == {"read_file": SPEC} and taken["confinement"] is not None
    for bad in (
        _grant(local=["write_file"]),  # no schema came for it
        _grant(max_calls="2"),
        _grant(cwd="relative"),
        _grant(files={"read_max_bytes": 1}),
        _grant(roots={"write": ["relative/"], "read": []}),
        _grant(local=["terminal"], allowed=["terminal"]),  # terminal without its shell
    ):
        with pytest.raises(GrantError):
            take_grant(bad, {**specs, "terminal": cast(ToolSpec, dict(SPEC))})
    bad_specs: Any
    for bad_specs in ({"rm": SPEC}, {"read_file": {"properties": []}}, []):
        with pytest.raises(GrantError):
            tool_specs(bad_specs)
