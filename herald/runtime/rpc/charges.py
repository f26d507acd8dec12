"""What a run's large call frames and replies hold in Herald, counted against its cap on bytes in
flight (herald/inflight.py): the RPC server's (host mode) and the exec channel's (backend mode).

A call frame over FREE_BYTES holds FRAME_HELD_PER_BYTE times its length while it is read and
decoded, and its arguments while the call runs: that much is taken when its length is known
(`admit`) and given back once its reply is sent (`give_back`). A reply over FREE_BYTES is taken
while it is sent (`reply_to_send`). What does not fit gets an InflightLimit error that says what
to do (inflight.InflightBytes.refusal).
"""

from __future__ import annotations

from typing import Any

from ..._sandbox.wire.framing import reply_frame
from ...inflight import FRAME_HELD_PER_BYTE, FREE_BYTES, MIB, InflightBytes
from ..calls import error

# What a held frame was charged to (its run's cap; None: no cap) and how much.
Charge = tuple[InflightBytes | None, int]


def admit(budget: InflightBytes | None, size: int) -> Charge | None:
    """Take what a call frame of `size` bytes holds from `budget`; None when it does not fit."""
    held = FRAME_HELD_PER_BYTE * size
    if budget is not None and not budget.take(held):
        return None
    return budget, held


def give_back(charge: Charge | None) -> None:
    if charge is not None and charge[0] is not None:
        charge[0].give(charge[1])


def refused_call(budget: InflightBytes | None, size: int, tool: Any = None) -> dict[str, Any]:
    """The error reply of a call whose frame of `size` bytes did not fit."""
    what = f"This {tool} call" if tool else "This tool call"
    what += f" (a request of {size / MIB:.1f} MiB)"
    held = FRAME_HELD_PER_BYTE * size
    message = budget.refusal(held, what) if budget is not None else f"{what} could not be held."
    # A plain dict while backend/child.py's `_reply` takes one (it could take a CallOutcome).
    return {"error": {"type": "InflightLimit", "message": message}}


def reply_to_send(budget: InflightBytes | None, message: dict[str, Any], frame: bytes,
                  echo: tuple[str, ...] = ("id",)) -> tuple[bytes, int]:
    """(the frame to send for `message`'s reply `frame`, what was taken from `budget` for it, to
    give back once sent): a large reply that does not fit becomes an error saying so."""
    size = len(frame)
    if budget is None or size <= FREE_BYTES:
        return frame, 0
    if budget.take(size):
        return frame, size
    what = f"The result of this {message.get('tool')} call ({size / MIB:.1f} MiB)"
    dropped = budget.refusal(size, what).replace("was not run", "was dropped")
    return reply_frame(message, error("InflightLimit", dropped), echo), 0
