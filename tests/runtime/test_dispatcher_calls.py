"""One path for every tool call (herald/runtime/calls.py, Dispatcher.handle): a model's direct
call, a script's call and the record of a call answered next to the script are checked, counted
and logged the same way, and what the transcript and the reply-bytes budget count of a script's
reply is what the script is sent (rpc/replies.py). A script's client reads Herald's replies with
the wire's guard and takes a malformed one for a broken link, not for an answer."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Settings
from herald._sandbox.child.client import ConnectionLost, RpcClient
from herald._sandbox.wire.framing import HEADER, FrameReader, decode_body, encode_frame
from herald.backends.local import LocalBackend
from herald.policy import Policy
from herald.runtime.calls import Answered, direct_call, recorded_call
from herald.runtime.dispatcher import Dispatcher
from herald.runtime.rpc.replies import MEASURED, script_reply
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext
from herald.transcript import Transcript


@pytest.fixture
def dispatcher(local_backend: LocalBackend, settings: Settings, tmp_path: Path) -> Iterator[Dispatcher]:
    (Path(local_backend.cwd) / "a.txt").write_text("alpha\n")
    transcript = Transcript(tmp_path / "transcript.jsonl")
    ctx = ToolContext(backend=local_backend, settings=settings)
    yield Dispatcher(default_registry(), ctx, transcript=transcript, policy=Policy.from_settings(settings))
    transcript.close()
    ctx.close()


def records(dispatcher: Dispatcher) -> list[dict[str, Any]]:
    assert dispatcher.transcript is not None
    dispatcher.transcript.flush()
    lines = dispatcher.transcript.path.read_text().splitlines()
    return [json.loads(line) for line in lines]


def body(frame: bytes) -> dict[str, Any]:
    return decode_body(frame[HEADER.size:])


def test_a_script_call_is_answered_in_the_frame_whose_size_is_recorded(dispatcher: Dispatcher) -> None:
    scope = dispatcher.new_scope(5)
    frame = script_reply(dispatcher.handle, scope, {"id": 7, "tool": "read_file", "args": {"path": "a.txt"}})
    reply = body(frame)
    assert reply["id"] == 7 and "alpha" in reply["result"]["content"], reply
    assert scope.calls == 1
    (record,) = records(dispatcher)
    assert record["type"] == "sandbox_tool_call" and record["run"] == scope.run_id and record["tool"] == "read_file"
    assert record["reply_bytes"] == len(frame) - HEADER.size  # what was sent, to the byte


def test_a_script_call_past_the_reply_bytes_budget_gets_the_error_it_is_sent(dispatcher: Dispatcher) -> None:
    scope = dispatcher.new_scope(5, budgets={"reply_bytes": 10})
    frame = script_reply(dispatcher.handle, scope, {"id": 1, "tool": "read_file", "args": {"path": "a.txt"}})
    reply = body(frame)
    assert reply["id"] == 1 and reply["error"]["type"] == "BudgetExhausted", reply
    assert scope.refused_calls == 1
    (record,) = records(dispatcher)
    assert record["error"]["type"] == "BudgetExhausted" and record["reply_bytes"] == len(frame) - HEADER.size


def test_what_a_script_may_not_call_is_refused_in_its_words(dispatcher: Dispatcher) -> None:
    scope = dispatcher.new_scope(1)
    for name in (None, 7, "", "fly", "browser_screenshot"):  # not a name; unknown; direct calls only
        reply = body(script_reply(dispatcher.handle, scope, {"id": 1, "tool": name, "args": {}}))
        assert reply["error"]["type"] in {"UnknownTool", "ToolNotAvailable"}, reply
        assert "Available in this script:" in reply["error"]["message"]
    assert scope.calls == 0  # a refused name spends nothing of the budget
    script_reply(dispatcher.handle, scope, {"id": 2, "tool": "read_file", "args": {"path": "a.txt"}})
    past = body(script_reply(dispatcher.handle, scope, {"id": 3, "tool": "read_file", "args": {"path": "a.txt"}}))
    assert past["error"]["type"] == "ToolCallLimit" and scope.refused_calls == 1
    told = body(script_reply(dispatcher.handle, dispatcher.new_scope(5),
                             {"id": 4, "tool": "read_file", "args": {"path": "a.txt"}, "past_budget": True}))
    assert told["error"]["type"] == "ToolCallLimit"  # the script's side counted it past already


def test_a_direct_call_goes_the_same_way_without_a_budget(dispatcher: Dispatcher) -> None:
    ok = dispatcher.handle(direct_call("read_file", {"path": "a.txt"}, "call_1", wire=MEASURED))
    assert "alpha" in ok["result"]["content"]
    # What only scripts may not pass (terminal's `background`) a direct call may.
    background = dispatcher.handle(direct_call("terminal", {"command": "true", "background": True}, "call_2"))
    assert "pid" in background["result"], background
    in_script = body(script_reply(dispatcher.handle, dispatcher.new_scope(5),
                                  {"id": 1, "tool": "terminal", "args": {"command": "true", "background": True}}))
    assert "background" in in_script["error"]["message"], in_script
    unknown = dispatcher.call_direct("fly", {})
    assert unknown["error"]["type"] == "UnknownTool" and "Enabled tools:" in unknown["error"]["message"]
    first = records(dispatcher)[0]
    assert first["type"] == "tool_call" and first["run"] == "call_1"
    assert first["reply_bytes"] == len(encode_frame(ok)) - HEADER.size


def test_a_record_is_counted_and_logged_and_runs_nothing(dispatcher: Dispatcher) -> None:
    scope = dispatcher.new_scope(2)
    seen: list[tuple[str, str | None]] = []
    dispatcher.on_script_call = lambda tool, kind: seen.append((tool, kind))
    failed = Answered({"type": "FileNotFound", "message": "no"}, 40, 0.001, in_script=True)
    outcome = dispatcher.handle(recorded_call(scope, "write_file", {"path": "made.txt"}, failed))
    assert outcome == {"error": {"type": "FileNotFound", "message": "no"}}
    dispatcher.handle(recorded_call(scope, "read_file", "{'path': 'a.txt'}", Answered(None, 12, 0.002, False)))
    assert not (Path(dispatcher.ctx.backend.cwd) / "made.txt").exists()
    assert scope.calls == 2 and seen == [("write_file", "FileNotFound"), ("read_file", None)]
    in_script, in_backend = records(dispatcher)
    assert in_script["in_script"] is True and in_script["reply_bytes"] == 40
    assert in_script["error"]["type"] == "FileNotFound"
    assert in_backend["in_backend"] is True and in_backend["args"] == "{'path': 'a.txt'}"


def _serve_once(herald: socket.socket, reply: bytes) -> None:
    frames = FrameReader(herald)
    frames.read()  # the auth frame
    frames.read()  # the call
    herald.sendall(reply)


@pytest.mark.parametrize("reply", [
    {"id": 1},
    {"id": 1, "error": "boom"},
    {"id": 1, "error": {"type": "ToolError"}},
    {"id": 1, "result": 1, "error": {"type": "ToolError", "message": "both"}},
])
def test_a_script_takes_a_malformed_reply_for_a_broken_link(reply: dict[str, Any]) -> None:
    script_end, herald_end = socket.socketpair()
    herald = threading.Thread(target=_serve_once, args=(herald_end, encode_frame(reply)), daemon=True)
    herald.start()
    client = RpcClient(lambda: script_end, "token")
    with pytest.raises(ConnectionLost, match="lost the connection to Herald"):
        client.call("read_file", {"path": "a.txt"})
    herald.join(timeout=30)
    herald_end.close()
