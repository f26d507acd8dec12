"""Reading the wire contract (wire/frames.py): each channel's guard, and the fork server's encoder.

A reader passes each decoded frame to its channel's guard, which checks the frame's tag and
fields against the table below (one entry per frame) and returns it typed, or raises FrameError.
Stdlib only, Python >= 3.8, like the rest of this package.
"""

from __future__ import annotations

import json
from typing import Any, Dict, FrozenSet, Tuple, Union, cast

from .frames import (
    AUTH,
    CLOSE,
    CODE,
    CWD,
    DONE,
    ERR,
    ERROR,
    EXIT,
    FAILED,
    FORK,
    FORKED,
    KILL,
    LEAVING,
    OUT,
    PREPARE,
    READY,
    REAP,
    RECORD,
    REMOVED,
    START,
    AuthFrame,
    CallFrame,
    FromChild,
    FromSupervisor,
    FromZygote,
    RecordFrame,
    ReplyFrame,
    ToChild,
    ToClient,
    ToSupervisor,
    ToZygote,
    TransactionRequest,
)
from .framing import ProtocolError


class FrameError(ProtocolError, ValueError):
    """A decoded frame that is not one its channel carries (unknown tag, missing or mistyped
    field). Readers of a stream a script can write to drop it; others close the link."""


# Each frame's fields: (key, the types it takes, required). `int` never takes a bool.
_NONE = type(None)
_NUMBER = (int, float)
Fields = Tuple[Tuple[str, Tuple[type, ...], bool], ...]
_TAGGED: Dict[str, Fields] = {
    AUTH: (("token", (str,), True),),
    READY: (("pid", (int,), False),),
    DONE: (("exit_code", (int,), True),),
    LEAVING: (),
    EXIT: (("exit_code", (int,), True),),
    RECORD: (("tool", (str,), True), ("duration_ms", _NUMBER, True), ("reply_bytes", (int,), True),
             ("error", (dict,), False), ("cwd", (str,), False)),
    CWD: (("cwd", (str,), True),),
    PREPARE: (("env", (dict,), True), ("loader", (str,), True), ("fork_server", (str, _NONE), False),
              ("isolation", (dict, _NONE), False), ("tool_specs", (dict,), False)),
    START: (("mode", (str,), False), ("socket", (str,), False), ("token", (str,), False), ("cwd", (str, _NONE), False),
            ("code", (str, _NONE), False), ("sentinel", (str, _NONE), False), ("line_buffered", (bool, _NONE), False),
            ("max_parallel", (int, _NONE), False)),
    CODE: (("code", (str,), True), ("line_buffered", (bool, _NONE), False)),
    KILL: (("grace", _NUMBER, True),),
    CLOSE: (("remove", (bool,), False),),
    REMOVED: (("ok", (bool,), True),),
    OUT: (("data", (str,), True),),
    ERR: (("data", (str,), True),),
    FAILED: (("error", (str,), True),),
}
_OPS: Dict[str, Fields] = {
    FORK: (("sandbox_dir", (str,), True),),
    REAP: (("pid", (int,), True),),
    FORKED: (("pid", (int,), True),),
    ERROR: (("message", (str,), True),),
    EXIT: (("pid", (int,), True), ("status", (int,), True)),
    READY: (("pid", (int,), True),),
}
# A transaction call's arguments (frames.TRANSACTION_CALL), by their "op".
_TRANSACTION_OPS: Dict[str, Fields] = {
    "begin": (("verify", (str, _NONE), True), ("timeout", (int, float, _NONE), True),
              ("workdir", (str, _NONE), True)),
    "end": (("id", (str,), True), ("error", (str, _NONE), True)),
}
_FROM_CHILD: FrozenSet[str] = frozenset({READY, DONE, LEAVING, EXIT, RECORD})
_TO_CHILD: FrozenSet[str] = frozenset({START, CODE})
_TO_SUPERVISOR: FrozenSet[str] = frozenset({PREPARE, START, CODE, KILL, CLOSE, CWD})
_FROM_SUPERVISOR: FrozenSet[str] = frozenset({READY, OUT, ERR, DONE, EXIT, FAILED, RECORD, REMOVED})
_TO_ZYGOTE: FrozenSet[str] = frozenset({FORK, REAP})
_FROM_ZYGOTE: FrozenSet[str] = frozenset({READY, FORKED, ERROR, EXIT})


_MISSING = object()


def _checked(message: Any, key: str, table: Dict[str, Fields], accepted: FrozenSet[str]) -> Dict[str, Any]:
    """`message` if its tag (under `key`) is in `accepted` and its fields have their types
    (`int` never takes a bool). On every frame of the hot paths: kept to a loop of lookups."""
    if not isinstance(message, dict):
        raise FrameError("a frame must be a JSON object, got %s" % type(message).__name__)
    tag = message.get(key)
    if tag not in accepted:
        raise FrameError("unexpected frame %s=%.40r here" % (key, tag))
    for field, kinds, required in table[tag]:
        value = message.get(field, _MISSING)
        if value is _MISSING:
            if required:
                raise FrameError("%s frame: %r is missing" % (tag, field))
        elif not isinstance(value, kinds) or ((value is True or value is False) and bool not in kinds):
            raise FrameError("%s frame: %r must be %s" % (tag, field, "/".join(k.__name__ for k in kinds)))
    if tag == RECORD and "error" in message and not isinstance(message["error"].get("type"), str):
        raise FrameError("record frame: its error needs a 'type'")
    return message


# -- the guards, one per channel -------------------------------------------------------------


def auth(message: Any) -> AuthFrame:
    """The first frame of an RPC connection."""
    return cast(AuthFrame, _checked(message, "type", _TAGGED, frozenset({AUTH})))


def record(message: Any) -> RecordFrame:
    """A record of a call answered next to the script (what both its channels carry of it)."""
    return cast(RecordFrame, _checked(message, "type", _TAGGED, frozenset({RECORD})))


def from_child(message: Any) -> FromChild:
    """A frame on a sandbox child's control pipe, from the child (a script may forge these)."""
    return cast(FromChild, _checked(message, "type", _TAGGED, _FROM_CHILD))


def to_child(message: Any) -> ToChild:
    """A frame on a sandbox child's control pipe, to the child (child/bootstrap.py)."""
    return cast(ToChild, _checked(message, "type", _TAGGED, _TO_CHILD))


def reply(message: Dict[str, Any]) -> ReplyFrame:
    """An untagged frame to the script's side, as a call's reply: its id, and a result or an
    error with its type and message (what the script's ToolError is made of)."""
    call_id = message.get("id", _MISSING)
    if call_id is not None and (not isinstance(call_id, (int, str)) or call_id is True or call_id is False):
        raise FrameError("a reply's 'id' must be its call's")
    if "result" in message:
        if "error" in message:
            raise FrameError("a reply carries a result or an error, not both")
        return cast(ReplyFrame, message)
    error = message.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("type"), str) \
            or not isinstance(error.get("message"), str):
        raise FrameError("a reply carries a result, or an error with its 'type' and 'message'")
    return cast(ReplyFrame, message)


def transaction(args: Any) -> TransactionRequest:
    """The arguments of a script's transaction call (frames.TRANSACTION_CALL): begin or end."""
    return cast(TransactionRequest, _checked(args, "op", _TRANSACTION_OPS, frozenset(_TRANSACTION_OPS)))


def to_supervisor(message: Any) -> ToSupervisor:
    """A frame Herald sent a supervisor: tagged, or a reply naming its connection."""
    if isinstance(message, dict) and "type" not in message:
        if "tool" in message or not isinstance(message.get("conn"), int):
            raise FrameError("a reply to the supervisor names its connection")
        return reply(message)
    return cast(ToSupervisor, _checked(message, "type", _TAGGED, _TO_SUPERVISOR))


def from_supervisor(message: Any) -> FromSupervisor:
    """A frame a supervisor sent Herald: tagged, or a call of the script (with its connection)."""
    if isinstance(message, dict) and "type" not in message:
        if "tool" not in message or "id" not in message:
            raise FrameError("an untagged frame from the supervisor is a call: it needs 'id' and 'tool'")
        return cast(CallFrame, message)
    return cast(FromSupervisor, _checked(message, "type", _TAGGED, _FROM_SUPERVISOR))


def to_client(message: Any) -> ToClient:
    """A frame Herald sent a script's RPC connection: a reply, or a CwdFrame before one."""
    if isinstance(message, dict) and "type" not in message:
        return reply(message)
    return cast(ToClient, _checked(message, "type", _TAGGED, frozenset({CWD})))


def relayed_call(message: Any, conn: int) -> CallFrame:
    """A call a script sent its supervisor, as relayed to Herald: only what a call is made of
    (a script must not pass for the supervisor), tagged with its connection's number."""
    if not isinstance(message, dict) or "type" in message:
        raise FrameError("a call frame carries no 'type'")
    call_id = message.get("id")
    if not isinstance(call_id, (int, str)) or isinstance(call_id, bool):
        raise FrameError("a call's 'id' must be a number")
    call = {"id": call_id, "tool": message.get("tool"), "args": message.get("args"), "conn": conn}
    return cast(CallFrame, call)


def _op(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FrameError("fork server message is not UTF-8 JSON: %s" % exc) from None


def to_zygote(data: bytes) -> ToZygote:
    """A datagram a fork server's client sent it."""
    return cast(ToZygote, _checked(_op(data), "op", _OPS, _TO_ZYGOTE))


def from_zygote(data: bytes) -> FromZygote:
    """A datagram a fork server sent its client."""
    return cast(FromZygote, _checked(_op(data), "op", _OPS, _FROM_ZYGOTE))


def encode_op(message: Union[ToZygote, FromZygote]) -> bytes:
    """A fork server message as its datagram (one JSON object, no length: SOCK_SEQPACKET)."""
    return json.dumps(message).encode("utf-8")
