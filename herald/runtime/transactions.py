"""Transactions in scripts, Herald's side: `with transaction(verify=...)` (the script's side is
herald/_sandbox/child/transaction.py; its requests are typed in _sandbox/wire/frames.py).

A script's begin and end arrive as calls of its run (frames.TRANSACTION_CALL) and the Dispatcher
hands them here (`serve`): a begin takes a snapshot of the directory covered (herald/checkpoints,
taken where the workspace is, so host and backend mode are the same here), an end runs `verify`
as a `terminal` call of the run through `Dispatcher.handle` (allow-list, policy, approvals and
the run's budgets apply), then keeps the changes (the snapshot is released) or restores the
snapshot. Each run has a stack of open transactions: an inner one that commits folds into the
outer (whose snapshot is older), an outer one that rolls back undoes it too; ending one ends
those opened after it first (rolled back: left open). When a run ends, the Runtime calls
`end_run` before `execute` returns: whatever is still open (a timeout, an interrupt, a crash,
`os._exit`, a supervisor gone) is rolled back, and the result's notes say so.

Other runs: runs of one Runtime take turns (kernel cells too), but direct calls (the agent's,
an MCP client's) run beside a script. The Dispatcher tells `writing` of every mutating call: the
files another run writes through the file tools while a transaction is open are its
`conflicts`, kept as that run left them when it rolls back; such a write waits while a rollback
acts, so the two never interleave. What another run changes with `terminal` cannot be told
apart from the block's own changes (a command may touch any file): it is rolled back with them,
and the reason says that a command ran. Another Runtime (another process) on the same files is
not seen at all.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import posixpath
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .._sandbox.wire import frames
from .._sandbox.wire import guards as wire
from ..checkpoints import Changes, SnapshotError, Snapshots, snapshots_for
from ..tools.resources import ANY_FILE, Resource
from .calls import CallOutcome, ToolCall, error, script_call
from .rpc.replies import MEASURED
from .scope import CallScope

if TYPE_CHECKING:
    from ..policy import Gate
    from ..tools.context import ToolContext
    from ..transcript import Transcript

log = logging.getLogger(__name__)
MAX_OPEN = 16  # open transactions per run: each holds a snapshot
MAX_LISTED = 1000  # paths listed in an outcome (a block that ran `npm install` changes many more)
VERIFY_TAIL = 2000  # characters of the verify command's output kept
END_WAIT_SECONDS = 60.0  # for the calls of an ended run to return before its rollback (a hang, not a pace)


@dataclass(eq=False)
class _Open:
    id: str
    scope: CallScope
    root: str
    snapshots: Snapshots | None  # None while its snapshot is being taken
    snapshot: str
    request: frames.TransactionBegin
    conflicts: set[str] = field(default_factory=set)  # absolute paths another run wrote
    commands_elsewhere: int = 0  # terminal commands (or other whole-tree writes) of other runs
    ending: bool = False


class _Refused(Exception):
    """A request that cannot be served: the message says what to do."""


class Transactions:
    """The open transactions of one Dispatcher's runs (thread-safe)."""

    def __init__(self, handle: Callable[[ToolCall], CallOutcome], ctx: ToolContext, gate: Gate,
                 transcript: Transcript | None) -> None:
        self._handle = handle
        self._ctx = ctx
        self._gate = gate
        self._transcript = transcript
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._open: list[_Open] = []  # in the order opened
        self._busy = 0  # begins and ends being served
        self._restoring: list[CallScope] = []  # whose rollbacks act now
        self._writing: dict[int, int] = {}  # id(scope) (0: direct calls) -> their writes running now

    # -- the script's requests ---------------------------------------------------------------

    def serve(self, scope: CallScope, args: Any) -> CallOutcome:
        """A begin or end from a script of the run `scope`: its reply."""
        try:
            request = wire.transaction(args)
        except wire.FrameError as exc:
            return error("TransactionError", f"a malformed transaction request ({exc}): use hermes_tools.transaction")
        with self._cond:
            if scope.cancel.is_set():
                return error("Interrupted", "transaction: the run is over; nothing was done.")
            self._busy += 1
        try:
            if request["op"] == "begin":
                return {"result": self._begin(scope, request)}
            return self._end(scope, request)
        except _Refused as exc:
            return error("TransactionError", str(exc))
        except SnapshotError as exc:
            return error("SnapshotError", f"transaction: {exc}")
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def _begin(self, scope: CallScope, request: frames.TransactionBegin) -> frames.TransactionOpened:
        timeout = request["timeout"]
        if timeout is not None and not (0 < timeout < math.inf):
            raise _Refused("transaction(timeout=...) must be a positive number of seconds")
        root = self._root(request["workdir"])
        with self._cond:
            if sum(1 for tx in self._open if tx.scope is scope) >= MAX_OPEN:
                raise _Refused(f"{MAX_OPEN} transactions are open in this run already: end one first")
            # Listed before its snapshot is taken: another run's write from now on is a conflict.
            tx = _Open(f"tx-{next(self._ids)}", scope, root, None, "", request)
            self._open.append(tx)
        try:
            snapshots = snapshots_for(self._ctx.backend, root, self._ctx.settings)
            tx.snapshot = snapshots.take(f"transaction {tx.id} of {scope.run_id}")
            tx.snapshots = snapshots
        except BaseException:
            self._drop(tx)
            raise
        self._record("begin", tx)
        return {"id": tx.id, "root": root}

    def _root(self, workdir: str | None) -> str:
        """The directory a transaction covers: the workspace, or `workdir` inside it."""
        workspace = self._gate.workspace
        if workdir is None:
            return workspace.roots[0]
        resolved = workspace.resolve(workdir)
        if resolved is None or not workspace.inside(resolved):
            raise _Refused(f"transaction(workdir={workdir!r}): the directory must lie inside the workspace "
                           f"({', '.join(workspace.roots)}); leave workdir out to cover the whole workspace")
        return resolved

    def _end(self, scope: CallScope, request: frames.TransactionEnd) -> CallOutcome:
        with self._cond:
            tx = next((t for t in self._open if t.id == request["id"] and t.scope is scope), None)
            if tx is None or tx.ending or tx.snapshots is None:
                raise _Refused(f"no open transaction {request['id']!r} in this run: it has ended already (a "
                               "transaction ends once), or was rolled back when its run ended")
            later = [t for t in self._open[self._open.index(tx) + 1:] if t.scope is scope]
            for ending in (tx, *later):
                ending.ending = True
        for inner in reversed(later):  # left open inside this one: undone first
            self._settle(inner, "still open when an outer transaction ended")
        if request["error"] is not None:
            return {"result": self._settle(tx, f"the block raised {request['error']}")}
        verified = self._verify(tx) if tx.request["verify"] is not None else None
        failure = None if verified is None else _verify_failure(verified)
        return {"result": self._settle(tx, failure, verified)}

    def _verify(self, tx: _Open) -> frames.VerifyOutcome:
        """The verify command's outcome: a terminal call of the transaction's run."""
        command = str(tx.request["verify"])
        args: dict[str, Any] = {"command": command}
        if tx.request["timeout"] is not None:
            args["timeout"] = tx.request["timeout"]
        # In `workdir`, else the session's directory; either way the command does not move the
        # session (its `cd` stays its own), as a script's own terminal call could.
        args["workdir"] = tx.root if tx.request["workdir"] is not None else self._ctx.backend.cwd
        outcome = self._handle(script_call(tx.scope, "terminal", args, MEASURED, inner=True))
        if "error" in outcome:
            problem = outcome["error"]
            return {"command": command, "exit_code": None, "timed_out": problem["type"] == "Timeout",
                    "output": f"{problem['type']}: {problem['message']}"[-VERIFY_TAIL:]}
        result = outcome.get("result") or {}
        code = result.get("exit_code")
        return {"command": command, "exit_code": code if isinstance(code, int) else None,
                "output": str(result.get("output", ""))[-VERIFY_TAIL:], "timed_out": bool(result.get("timed_out"))}

    def _settle(self, tx: _Open, failure: str | None,
                verified: frames.VerifyOutcome | None = None) -> frames.TransactionOutcome:
        """Keep `tx`'s changes (`failure` None) or roll them back; it is closed either way."""
        snapshots = tx.snapshots
        assert snapshots is not None
        try:
            if failure is None:
                changes = snapshots.changes(tx.snapshot)
            else:
                try:
                    changes = self._rollback(tx, snapshots)
                except SnapshotError as exc:
                    raise SnapshotError(f"{tx.id} could NOT be rolled back ({failure}): {exc}. The files under "
                                        f"{tx.root} may hold part of the block's changes.") from None
            with contextlib.suppress(SnapshotError):
                snapshots.release(tx.snapshot)
        finally:
            self._drop(tx)
        kept = self._relative(tx.root, tx.conflicts)
        changed = [path for path in changes.paths() if path not in kept]
        reason = failure
        if failure is not None and tx.commands_elsewhere:
            reason = (f"{failure} (another run of the session ran {tx.commands_elsewhere} terminal command(s) "
                      "meanwhile: what they changed cannot be told apart and was rolled back too)")
        if failure is not None and changes.not_covered:
            reason = f"{reason}; {len(changes.not_covered)} path(s) a snapshot limit left out were NOT rolled back"
        self._record("commit" if failure is None else "rollback", tx, len(changed), reason)
        return {"committed": failure is None, "changed": changed[:MAX_LISTED], "changed_count": len(changed),
                "verify": verified, "reason": reason, "conflicts": sorted(kept)[:MAX_LISTED],
                "not_covered": list(changes.not_covered[:MAX_LISTED])}

    def _rollback(self, tx: _Open, snapshots: Snapshots) -> Changes:
        """Restore `tx`'s snapshot but what other runs wrote meanwhile; their file writes wait
        while it acts (`writing`), and it waits for those already running. What the block had
        changed, as `changes` lists it (a restore lists a removed directory, not its files)."""
        try:
            changed: Changes | None = snapshots.changes(tx.snapshot)
        except SnapshotError:  # the restore is what matters: it says what it did
            changed = None
        with self._cond:
            self._restoring.append(tx.scope)
            while any(count for key, count in self._writing.items() if key != id(tx.scope)):
                self._cond.wait()
            keep = self._relative(tx.root, tx.conflicts)
        try:
            restored = snapshots.restore(tx.snapshot, keep=keep)
            return restored if changed is None else replace(changed, not_covered=restored.not_covered)
        finally:
            with self._cond:
                self._restoring.remove(tx.scope)
                self._cond.notify_all()

    def _drop(self, tx: _Open) -> None:
        with self._cond:
            if tx in self._open:
                self._open.remove(tx)

    def _relative(self, root: str, paths: set[str]) -> set[str]:
        """`paths` (absolute, as the calls named them) relative to `root`; those outside it dropped.
        A path is also taken as it resolves (a link on the way, a relative root's realpath)."""
        found: set[str] = set()
        for path in paths:
            for candidate in {path, self._gate.workspace.resolve(path) or path}:
                if candidate.startswith(root.rstrip("/") + "/"):
                    found.add(posixpath.relpath(candidate, root))
        return found

    # -- other runs' writes ------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self, scope: CallScope | None, touched: Sequence[Resource]) -> Iterator[None]:
        """Around a mutating call's work (the Dispatcher's): once it has written, what it wrote
        is a conflict of every open transaction of another run (one listed while it ran too);
        while one of those rolls back, it waits to start."""
        key = 0 if scope is None else id(scope)
        with self._cond:
            while any(restoring is not scope for restoring in self._restoring):
                self._cond.wait()
            self._writing[key] = self._writing.get(key, 0) + 1
        wrote = False
        try:
            yield
            wrote = True
        finally:
            with self._cond:
                self._writing[key] -= 1
                if not self._writing[key]:
                    del self._writing[key]
                if wrote:
                    self._note_written(scope, touched)
                if self._restoring:
                    self._cond.notify_all()

    def _note_written(self, scope: CallScope | None, touched: Sequence[Resource]) -> None:
        paths = [r.key[len("file:"):] for r in touched if r.key.startswith("file:") and not r.shared]
        for tx in self._open:
            if tx.scope is scope:
                continue
            for path in paths:
                if path == ANY_FILE[len("file:"):]:
                    tx.commands_elsewhere += 1
                else:
                    tx.conflicts.add(path)

    # -- the end of a run --------------------------------------------------------------------

    def end_run(self, scope: CallScope) -> list[str]:
        """The run of `scope` is over (its calls stopped, so no request of it starts now): roll
        back what it left open, once the requests being served are done. Notes for its result,
        one per transaction."""
        notes = []
        with self._cond:
            open_here = any(tx.scope is scope for tx in self._open)
        # The run's calls were cancelled, but one may be past its last check, its write under way
        # (waiting for the backend's shell, say): the rollback waits for every one to have returned,
        # or its write would land on the restored files.
        if open_here and not scope.stop(END_WAIT_SECONDS):
            notes.append(f"{scope.running} call(s) of the run were still running {END_WAIT_SECONDS:g} s after it "
                         "ended: what they write after the rollback below is not undone.")
        with self._cond:
            while self._busy:
                self._cond.wait()
            left = [tx for tx in self._open if tx.scope is scope]  # listed until settled: writes still count
            for tx in left:
                tx.ending = True
        for tx in reversed(left):
            try:
                outcome = self._settle(tx, "the run ended with the block still open")
                notes.append(f"Transaction {tx.id} was still open when the run ended: rolled back "
                             f"({outcome['changed_count']} path(s) restored under {tx.root}).")
            except SnapshotError as exc:
                log.warning("at the end of %s: %s", tx.scope.run_id, exc)
                notes.append(f"Transaction {exc}")
        return notes

    def _record(self, event: str, tx: _Open, changed: int = 0, reason: str | None = None) -> None:
        if self._transcript is None:
            return
        record: dict[str, Any] = {"type": "transaction", "event": event, "run": tx.scope.run_id, "id": tx.id,
                                  "root": tx.root}
        if event != "begin":
            record.update(changed=changed, conflicts=len(tx.conflicts), reason=reason)
        try:
            self._transcript.write(record)
        except Exception:
            log.exception("could not write the transcript record of transaction %s", tx.id)


def _verify_failure(verified: frames.VerifyOutcome) -> str | None:
    """Why the verify command's outcome rolls the transaction back (None: it passed)."""
    if verified["exit_code"] == 0 and not verified["timed_out"]:
        return None
    if verified["timed_out"]:
        return f"verify `{verified['command']}` timed out"
    if verified["exit_code"] is None:
        return f"verify `{verified['command']}` could not run: {verified['output']}"
    return f"verify `{verified['command']}` exited with status {verified['exit_code']}"
