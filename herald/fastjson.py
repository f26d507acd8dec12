"""orjson in Herald's process when it is installed (the `fast` extra), the stdlib otherwise.

Serving a script's call encodes its reply frame, decodes its request and encodes a transcript
record: about 7 µs of a small call with the stdlib's json, under 1 µs with orjson (measured on
the bench machine). The JSON is the same for what orjson accepts (compact, UTF-8, `repr` for
objects JSON has no type for); what it refuses (a lone surrogate, an integer past 64 bits) goes
through the stdlib as before. The sandbox side never uses it: it stays stdlib-only.
The RPC server's module installs it for frames (`install`), once, as it is imported.
"""

from __future__ import annotations

import json
from typing import Any

from ._sandbox.wire import framing as protocol

orjson: Any
try:
    import orjson
except ImportError:  # the `fast` extra is not installed
    orjson = None


def _dumps(value: Any) -> bytes:
    assert orjson is not None
    encoded: bytes = orjson.dumps(value, default=repr, option=orjson.OPT_NON_STR_KEYS)
    return encoded


def _loads(body: Any) -> Any:
    assert orjson is not None
    return orjson.loads(body)


def record_line(record: dict[str, Any]) -> str:
    """One JSONL line for a transcript (non-ASCII kept, `repr` for what JSON cannot hold)."""
    if orjson is not None:
        try:
            return _dumps(record).decode("utf-8") + "\n"
        except Exception:  # a lone surrogate: the stdlib writes it as an escape
            pass
    return json.dumps(record, ensure_ascii=False, default=repr) + "\n"


def install() -> bool:
    """Let the frame codec use orjson (once per process); whether it is installed."""
    if orjson is None:
        return False
    protocol.use_fast_json(_dumps, _loads)
    return True
