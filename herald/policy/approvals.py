"""Asking a person about calls an `ask` rule stops (policy.py `Gate._ask` calls the approver).

- `TerminalApprovals`: the approver `herald exec` / `herald run` use on a terminal. It prints the
  call and reads one answer: allow once, always (this tool under this rule, for the rest of the
  session) or deny. Concurrent asks (parallel() in a script) wait for each other: one prompt at
  a time. `pause` is the caller's live view: it stops drawing while the question is on screen.
  `terminal_approvals()` makes one only when a person can answer: stdin is a terminal and CI is
  not set; otherwise there is no approver and the Gate refuses with a message naming the rule.
- `PausedTime`: the seconds a script's run spent waiting on a person. The Runtime wraps its
  approver with it; the kill clock and the run's tool-call deadline move by that much, so a slow
  answer does not burn the script's timeout (and the timeout still applies afterwards).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import IO, Protocol

from .policy import Approver, Policy, PolicyCall

ONCE, ALWAYS, DENY = "once", "always", "deny"
ANSWERS = {"y": ONCE, "yes": ONCE, "o": ONCE, "once": ONCE, "a": ALWAYS, "always": ALWAYS,
           "n": DENY, "no": DENY, "d": DENY, "deny": DENY, "": DENY}
POLL_SECONDS = 0.2
# Shown whole up to this size: a script may pad a command so that what matters comes after the
# cut, so what is cut is said plainly.
ARG_PREVIEW = 2000


def _printable(text: str) -> str:
    """Untrusted text (a script chose it) made safe to show: no escape sequences, no newlines."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def describe_call(call: PolicyCall) -> str:
    """The call as a few lines for a person to judge: tool, where it comes from, its arguments."""
    where = "from a script" if call.origin == "script" else "called by the model"
    lines = [f"{_printable(call.tool)} ({where}) needs approval: rule '{_printable(call.rule)}'"]
    for key, value in call.args.items():
        if value is None:  # an argument left to its default
            continue
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        shown = _printable(shown)
        if len(shown) > ARG_PREVIEW:
            hidden = len(shown) - ARG_PREVIEW
            shown = shown[:ARG_PREVIEW] + f"… [{hidden:,} more characters not shown: deny unless you know them]"
        lines.append(f"  {_printable(str(key))}: {shown}")
    return "\n".join(lines)


class TerminalApprovals:
    """An approver that asks on a terminal: `approvals(call) -> bool`. `read_fd` is where the
    answer is read (the terminal), `out` where the question is written."""

    def __init__(self, read_fd: int, out: IO[str],
                 pause: Callable[[], contextlib.AbstractContextManager[None]] | None = None) -> None:
        self.read_fd = read_fd
        self.out = out
        self.pause = pause
        self._one_at_a_time = threading.Lock()
        self._always: set[tuple[str, str]] = set()
        self._closed = threading.Event()
        self._pending = b""  # read but not yet used as an answer

    def close(self) -> None:
        """Stop asking: a question on screen is answered "deny", later ones are not asked."""
        self._closed.set()

    def __call__(self, call: PolicyCall) -> bool:
        with self._one_at_a_time:
            if (call.tool, call.rule) in self._always:
                return True
            if self._closed.is_set():
                return False
            with self.pause() if self.pause is not None else contextlib.nullcontext():
                answer = self._ask(call)
            if answer == ALWAYS:
                self._always.add((call.tool, call.rule))
            return answer != DENY

    def _ask(self, call: PolicyCall) -> str:
        question = "Allow? [y] once, [a] always for this tool and rule this session, [N] deny: "
        self._write(f"\nherald: {describe_call(call)}\n{question}")
        while True:
            line = self._read_line()
            if line is None:  # end of input or closed: nothing more will be answered
                self._write("\n(no answer: denied)\n")
                return DENY
            answer = ANSWERS.get(line.strip().lower())
            if answer is not None:
                self._write({ONCE: "allowed once\n", ALWAYS: "allowed for this session\n", DENY: "denied\n"}[answer])
                return answer
            self._write("please answer y, a or n: ")

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):
            pass

    def _read_line(self) -> str | None:
        """The next line typed (typed-ahead lines are kept for the next question); None at the
        end of input or once closed."""
        while b"\n" not in self._pending and len(self._pending) <= 4096:
            if self._closed.is_set():
                return None
            try:
                ready, _, _ = select.select([self.read_fd], [], [], POLL_SECONDS)
            except (OSError, ValueError):
                return None
            if not ready:
                continue
            try:
                chunk = os.read(self.read_fd, 1024)
            except BlockingIOError:
                continue
            except OSError:
                return None
            if not chunk:
                return None
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode("utf-8", "replace")


def can_ask(environ: dict[str, str] | None = None) -> bool:
    """A person can answer here: stdin is a terminal and this is not CI (CI=true or any value)."""
    env = os.environ if environ is None else environ
    if env.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    try:
        return sys.stdin is not None and os.isatty(sys.stdin.fileno())
    except (OSError, ValueError):
        return False


def terminal_approvals() -> TerminalApprovals | None:
    """The terminal approver when a person can answer (`can_ask`), else None."""
    if not can_ask():
        return None
    return TerminalApprovals(sys.stdin.fileno(), _question_stream())


def interrupting(interrupt: Callable[[], None], approvals: TerminalApprovals | None) -> Callable[[], None]:
    """What Ctrl-C does while a run may wait on a person: the question waiting for an answer
    closes, then `interrupt` (the script, or the agent) stops."""
    def stop() -> None:
        if approvals is not None:
            approvals.close()
        interrupt()
    return stop


def _question_stream() -> IO[str]:
    """Where the question shows: stderr on the terminal, else the terminal itself (stderr sent to
    a log file must not swallow the question), else stderr."""
    if sys.stderr.isatty():
        return sys.stderr
    try:
        return open("/dev/tty", "w", encoding="utf-8")  # open for the rest of the process
    except OSError:
        return sys.stderr


def with_approver(policy: Policy, approve: Approver | None) -> Policy:
    """`policy` asking `approve` (kept as it is when `approve` is None)."""
    return policy if approve is None else replace(policy, approve=approve)


class _Scope(Protocol):
    deadline: float | None
    pausing: Callable[[], float] | None


class PausedTime:
    """The seconds the current run waited on approvals (overlapping waits count once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = 0.0
        self._holders = 0
        self._since = 0.0
        self._scope: _Scope | None = None
        self._base: float | None = None

    def begin(self, scope: _Scope | None = None) -> None:
        """A new run: nothing waited yet; `scope.deadline` moves with the waits once each ends,
        and `scope.pausing` tells the seconds of the wait going on now (so a call's live
        deadline, deadline + pausing, moves while a person decides)."""
        with self._lock:
            self._total, self._scope = 0.0, scope
            self._base = scope.deadline if scope is not None else None
            if self._holders:
                self._since = time.monotonic()
        if scope is not None:
            scope.pausing = self.ongoing

    def ongoing(self) -> float:
        """Seconds of the wait on a person going on now (0.0 when nobody is being asked)."""
        with self._lock:
            return time.monotonic() - self._since if self._holders else 0.0

    def seconds(self) -> float:
        with self._lock:
            return self._total + (time.monotonic() - self._since if self._holders else 0.0)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self._lock:
            if not self._holders:
                self._since = time.monotonic()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if not self._holders:
                    self._total += time.monotonic() - self._since
                if self._scope is not None and self._base is not None:
                    # With `ongoing()` now 0 (or restarted), deadline + pausing stays continuous.
                    self._scope.deadline = self._base + self._total

    def wrap(self, policy: Policy) -> Policy:
        """`policy` whose approver's waits on a script's calls are counted here."""
        approve = policy.approve
        if approve is None:
            return policy

        def paused(call: PolicyCall) -> bool:
            if call.origin != "script":
                return approve(call)
            with self.hold():
                return approve(call)

        return replace(policy, approve=paused)


__all__ = ["ALWAYS", "DENY", "ONCE", "PausedTime", "TerminalApprovals", "can_ask", "describe_call",
           "terminal_approvals", "with_approver"]

