"""One call answered next to the script: bind, run, record (`answer_call`).

Stdlib only, Python >= 3.8 (the sandbox package). Both places that answer a call without Herald
do it with this one function: a backend-mode supervisor's workers (beside/workers.py) and a host-mode
script's own process (child/selfserve.py). Each says what running the call means there (the tool core
over its files, with its turns and its shell), and what it does with the answer.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Tuple

from ..toolcore.base import ToolError, bind_arguments
from ..wire import frames
from ..wire.framing import HEADER, body_size, encode_frame
from ..wire.grant import ToolSpec


def answer_call(
    tool: str, spec: ToolSpec, args: Any, call_id: Any, run: Callable[[Dict[str, Any]], Any], record_args: Any,
    encode: bool = True,
) -> Tuple[frames.ReplyFrame, bytes, frames.RecordFrame]:
    """Bind `args` to `spec` (toolcore's checks, in its words), `run` the bound arguments, and
    make the record Herald gets of the call (`record_args` its arguments there). Returns the
    reply (a ResultFrame or, from a ToolError, an ErrorFrame), its frame (b""
    without `encode`: the record gives its size all the same) and the record. Anything but a
    ToolError raises: the caller hands the call to Herald, nothing having been answered."""
    started = time.perf_counter()
    reply: frames.ReplyFrame
    try:
        bound = bind_arguments(tool, spec["properties"], spec["required"], args, spec["refused"])
        reply = {"result": run(bound), "id": call_id}
    except ToolError as exc:
        reply = {"error": {"type": exc.error_type, "message": str(exc)}, "id": call_id}
    if encode:
        frame = encode_frame(reply)
        size = len(frame) - HEADER.size
    else:
        frame, size = b"", body_size(reply)
    record: frames.RecordFrame = {
        "type": frames.RECORD, "tool": tool, "args": record_args,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3), "reply_bytes": size,
    }
    if "error" in reply:
        record["error"] = reply["error"]
    return reply, frame, record
