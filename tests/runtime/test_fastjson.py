"""orjson in the parent (herald/fastjson.py): the same frames and transcript lines as the
stdlib's json, whatever a tool returns; what orjson refuses takes the stdlib path."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from herald import fastjson
from herald._sandbox.wire import framing as protocol
from herald._sandbox.wire.framing import HEADER, decode_body, encode_frame

pytestmark = pytest.mark.skipif(fastjson.orjson is None, reason="orjson (the `fast` extra) is not installed")

class Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


VALUES: list[Any] = [
    {"id": 1, "result": {"content": "     1|ünï ☃ \U0001f600", "total_lines": 1}},
    {"id": 2, "result": "lone surrogate \ud800 from a surrogateescape file name"},
    {"id": 3, "result": 2**70},  # past orjson's 64-bit integers
    {"id": 4, "result": {1: "int key", "x": [1.5, -0.0, 1e300]}},
    {"id": 5, "result": {"object": Opaque()}},  # no JSON type: its repr
    {"id": 6, "error": {"type": "ToolError", "message": "tab\tnewline\n\"quote\" \\ back"}},
]


def _stdlib_frame(value: Any) -> bytes:
    try:
        body = protocol._encoder.encode(value).encode("utf-8")
    except UnicodeEncodeError:
        body = protocol._ascii_encoder.encode(value).encode("ascii")
    return HEADER.pack(len(body)) + body


@pytest.mark.parametrize("value", VALUES, ids=[str(v["id"]) for v in VALUES])
def test_frames_decode_to_what_the_stdlib_frames_decode_to(value: Any) -> None:
    assert fastjson.install()
    ours, theirs = encode_frame(value), _stdlib_frame(value)
    assert json.loads(ours[HEADER.size:]) == json.loads(theirs[HEADER.size:])
    assert decode_body(ours[HEADER.size:]) == decode_body(theirs[HEADER.size:])


def test_a_frame_orjson_cannot_read_is_read_by_the_stdlib() -> None:
    assert fastjson.install()
    assert math.isnan(decode_body(b'{"id": 1, "result": NaN}')["result"])  # orjson refuses NaN
    with pytest.raises(protocol.ProtocolError):
        decode_body(b'{"id": 1, "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(protocol.ProtocolError):
        decode_body(b"\xff\xfe not json")


def test_transcript_lines_match_the_stdlib() -> None:
    record = {"tool": "read_file", "args": {"path": "ünï"}, "odd": Opaque(), "n": 2**70,
              "s": "\ud800"}
    assert json.loads(fastjson.record_line(record)) == json.loads(
        json.dumps(record, ensure_ascii=False, default=repr))
