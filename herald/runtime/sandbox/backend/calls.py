"""The script's tool calls that reach Herald from an in-backend run (backend/child.py reads them
off the exec channel): served by the Runtime's Dispatcher on the pool its runs share, within the
run's cap on bytes held for its calls, each reply sent back on the channel; a call that moved the
session (terminal('cd ...')) is followed by the new directory, ahead of its reply."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar, cast

from ...._sandbox.wire import frames
from ...._sandbox.wire.framing import encode_frame, reply_frame
from ....inflight import InflightBytes
from ...rpc import charges
from ...rpc.server import Handler, serve_call
from ..contract import LocalGrants

# A call from the backend names its connection there as well as its id: the reply carries both.
CALL_KEYS = ("id", "conn")
S = TypeVar("S")
log = logging.getLogger(__name__)


class BackendCalls(Generic[S]):
    def __init__(
        self,
        send: Callable[[bytes], bool],
        handle: Handler[S],
        pool: ThreadPoolExecutor,
        tools: LocalGrants[S] | None,
        inflight: Callable[[S], InflightBytes | None] | None,
    ) -> None:
        self._send = send
        self._handle = handle
        self._pool = pool
        self._tools = tools
        self._inflight = inflight  # a run's cap on bytes held for its calls (herald/inflight.py)
        self.cwd_sent: str | None = None  # the directory the supervisor resolves paths against

    def dispatch(self, session: S | None, message: frames.CallFrame, size: int) -> None:
        """Serve `message` (`size`: its body's length when it was large) on the pool."""
        budget = self._inflight(session) if size and self._inflight and session is not None else None
        charge = charges.admit(budget, size) if budget is not None else None
        if budget is not None and charge is None:
            self._reply(message, charges.refused_call(budget, size, message.get("tool")))
            return
        try:
            self._pool.submit(self._serve, session, message, charge)
        except RuntimeError:  # the Runtime is closing: its pool takes no more work
            charges.give_back(charge)
            self._reply(message, {"error": {"type": "ConnectionLost", "message": "Herald is shutting down."}})

    def _serve(self, session: S | None, message: frames.CallFrame, charge: charges.Charge | None = None) -> None:
        try:
            self._serve_call(session, message)
        finally:
            charges.give_back(charge)

    def _serve_call(self, session: S | None, message: frames.CallFrame) -> None:
        if session is None:
            self._reply(
                message,
                {"error": {"type": "ConnectionLost", "message": "This run is over; its tool calls are closed."}},
            )
        elif isinstance(message.get("ran"), dict) and message.get("tool") == "terminal" and self._tools is not None:
            try:
                reply = reply_frame(message, self._tools.ran(session, message), echo=CALL_KEYS)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("a malformed terminal output from the backend's supervisor: %s", exc)
                self._reply(
                    message, {"error": {"type": "ConnectionLost", "message": "The supervisor's answer was malformed."}}
                )
                return
            self.cwd_sent = self._tools.cwd()
            self._send(reply)
        else:
            reply = serve_call(self._handle, session, cast(dict[str, Any], message), echo=CALL_KEYS)
            self._follow_cwd()
            self._send(reply)

    def _follow_cwd(self) -> None:
        """A call served here may have moved the session (terminal('cd ...')): the supervisor
        hears of it before the reply, so the script's next file call resolves as here."""
        if self._tools is None or self.cwd_sent is None:
            return
        cwd = self._tools.cwd()
        if cwd != self.cwd_sent:
            self.cwd_sent = cwd
            moved: frames.CwdFrame = {"type": frames.CWD, "cwd": cwd}
            self._send(encode_frame(moved))

    def _reply(self, message: frames.CallFrame, reply: dict[str, Any]) -> None:
        self._send(reply_frame(message, reply, echo=CALL_KEYS))
