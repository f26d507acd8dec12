"""`transaction()`, exported by `hermes_tools`: keep a block's changes to the workspace only if
it succeeds. Stdlib only, Python >= 3.8.

    with transaction(verify="pytest -q") as tx:
        for path in paths:
            patch(path, "old_name", "new_name")
    print(tx.committed, tx.changed, tx.verify)

Herald snapshots the workspace when the block starts (where the workspace is: this machine, the
SSH host, the container) and, when it ends, runs `verify` as a `terminal` call of the run. If
the block raised, or `verify` exits non-zero (or cannot run), every change the block made is
undone: through the file tools, `terminal`, or the script's own `open()`. Else they are kept.
The two requests travel as calls of the script's RPC connection (wire/frames.py
TRANSACTION_CALL), always to Herald (runtime/transactions.py), never answered beside the script.

What another run of the session (a direct tool call made meanwhile) wrote through the file
tools is kept on rollback and listed in `conflicts`; what another run changed with `terminal`
cannot be told apart from the block's own changes and is rolled back with them. Blocks nest: an
inner one that commits folds into the outer, which may still roll it back. A run that ends with
a block open (timeout, interrupt, crash, `os._exit`) has it rolled back before its result comes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..wire import frames
from . import client


class Transaction:
    """One block's transaction (see the module). After the block: `committed` (None while
    open), `changed` (paths relative to `root`), `verify` ({command, exit_code, output's tail,
    timed_out}, or None), `reason` (why it rolled back), `conflicts`, `not_covered`."""

    def __init__(self, verify: Optional[str], timeout: Optional[float], workdir: Optional[str]) -> None:
        self.command = verify
        self.timeout = timeout
        self.workdir = workdir
        self.root: Optional[str] = None
        self.committed: Optional[bool] = None
        self.changed: List[str] = []
        self.changed_count = 0
        self.verify: Optional[Dict[str, Any]] = None
        self.reason: Optional[str] = None
        self.conflicts: List[str] = []
        self.not_covered: List[str] = []
        self._id: Optional[str] = None

    def __enter__(self) -> Transaction:
        if self._id is not None or self.committed is not None:
            raise RuntimeError("a transaction() is used for one block: make a new one for the next")
        begin: frames.TransactionBegin = {"op": "begin", "verify": self.command, "timeout": self.timeout,
                                          "workdir": self.workdir}
        opened: frames.TransactionOpened = client.call(frames.TRANSACTION_CALL, dict(begin))
        self._id, self.root = opened["id"], opened["root"]
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        failed = None if kind is None else _describe(kind, exc)
        end: frames.TransactionEnd = {"op": "end", "id": str(self._id), "error": failed}
        try:
            outcome: frames.TransactionOutcome = client.call(frames.TRANSACTION_CALL, dict(end))
        except client.ToolError as problem:
            self.committed = False
            self.reason = "%s%s" % ("" if failed is None else "the block raised %s; then " % failed, problem)
            if failed is None:
                raise
            return  # the block's own exception goes on
        self.committed = bool(outcome["committed"])
        self.changed, self.changed_count = list(outcome["changed"]), int(outcome["changed_count"])
        self.verify = dict(outcome["verify"]) if outcome["verify"] is not None else None
        self.reason = outcome["reason"]
        self.conflicts, self.not_covered = list(outcome["conflicts"]), list(outcome["not_covered"])

    def __repr__(self) -> str:
        state = {None: "open" if self._id else "not started", True: "committed", False: "rolled back"}
        return "<transaction %s, %d file(s) changed%s>" % (
            state[self.committed], self.changed_count, "" if not self.reason else ": " + self.reason)


def transaction(verify: Optional[str] = None, *, timeout: Optional[float] = None,
                workdir: Optional[str] = None) -> Transaction:
    """`with transaction(verify="pytest -q") as tx:` keeps the block's changes to the workspace
    only if the block does not raise and `verify` (a shell command, optional) exits 0; else
    every change is undone (file tools, terminal, open() alike). `timeout`: the verify
    command's, in seconds. `workdir`: the directory covered, inside the workspace (default: the
    workspace); verify runs there (default: in the session's directory; it never moves the
    session). Afterwards: tx.committed, tx.changed, tx.verify (exit_code,
    output's tail), tx.reason, tx.conflicts (paths another run wrote meanwhile: kept)."""
    if verify is not None and (not isinstance(verify, str) or not verify.strip()):
        raise TypeError("transaction(verify=...) takes a shell command (a non-empty str) or None")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise TypeError("transaction(timeout=...) takes seconds (a positive number) or None")
    if workdir is not None and (not isinstance(workdir, str) or not workdir):
        raise TypeError("transaction(workdir=...) takes a directory path (a str) or None")
    return Transaction(verify, timeout, workdir)


def _describe(kind: Any, exc: Any) -> str:
    text = str(exc) if exc is not None else ""
    name = getattr(kind, "__name__", "exception")
    return "%s: %s" % (name, text[:500]) if text else name
