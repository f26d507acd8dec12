"""Session checkpoints: before each execute_code run a snapshot; a run that changed the workspace
leaves the one taken before it ("before run N"), one that changed nothing gives its back.

A run's changes are known when the next snapshot is taken, so the last checkpoint is pending:
kept until the next run shows whether its run changed anything. Retention: `checkpoints.keep`
per session, and the store under `checkpoints.max_store_mb` (oldest checkpoints first, this
session's, then other sessions'). A workspace a limit rules out (too many files, no python3 on
the backend) turns checkpoints off for the session, with one note.
"""

from __future__ import annotations

import time

from ..backends.base import Backend
from ..config import Settings
from .records import (
    Checkpoint,
    SessionRecord,
    editing,
    record_path,
    remember_too_large,
    seen_too_large,
    too_large_key,
)
from .snapshots import Changes, SnapshotError, Snapshots, WorkspaceTooLarge, snapshots_for

LABEL = "checkpoint "  # + session + run: how the store tells checkpoints from other snapshots


def first_line(code: str) -> str:
    for line in code.splitlines():
        if line.strip():
            text = line.strip()
            return text if len(text) <= 100 else text[:99] + "…"
    return "(empty script)"


class SessionCheckpoints:
    """The checkpoints of session `session` on `backend` (its workspace: `root`)."""

    def __init__(self, backend: Backend, settings: Settings, session: str, *, root: str | None = None,
                 backend_spec: str = "") -> None:
        self.backend = backend
        self.settings = settings
        self.session = session
        self.path = record_path(settings, session)
        self._root = root
        self._spec = backend_spec
        self._used: Snapshots | None = None

    def _fresh(self) -> SessionRecord:
        root = self._root or self.backend.cwd
        kind = (self._spec.split(":", 1)[0].strip().lower() or "local") if self._spec else ""
        spec = self._spec if kind == self.backend.name else self.backend.name
        container = self.settings.docker.name if self.backend.name == "docker" else ""
        return SessionRecord(self.session, self.backend.name, spec, root, container=container)

    def snapshots(self, record: SessionRecord) -> Snapshots:
        self._used = snapshots_for(self.backend, record.root, self.settings)
        return self._used

    def close(self) -> None:
        """Stop the engine's process on a remote backend (a later call starts another)."""
        if self._used is not None:
            self._used.close()

    def before_run(self, code: str) -> list[str]:
        """Called before each run: its checkpoint. Notes for the run's result (checkpoints turned off)."""
        if not self.settings.checkpoints.enabled:
            return []
        with editing(self.path, self._fresh()) as record:
            record.runs += 1
            if record.off:
                return []
            key = too_large_key(record) if not record.checkpoints else None
            seen = seen_too_large(self.settings, key, time.time()) if key else None
            if seen:
                record.off = seen
                return [f"Checkpoints are off for this session: {seen}"]
            return self._mark(record, record.runs, first_line(code))

    def _mark(self, record: SessionRecord, run: int, title: str) -> list[str]:
        snaps = self.snapshots(record)
        try:
            pending = record.checkpoints[-1] if record.checkpoints else None
            since = pending.snapshot if pending else None
            taken = snaps.take_counted(f"{LABEL}{self.session} {run}", since=since, reuse=True)
            while taken.store_full and self._make_room(record, snaps, taken.id):  # old checkpoints go before new files
                snaps.release(taken.id)
                taken = snaps.take_counted(f"{LABEL}{self.session} {run}", since=since, reuse=True)
            point = Checkpoint(run, taken.id, time.time(), title, first_run=run)
            if pending is not None and taken.id == pending.snapshot:  # its run changed nothing: it stands for this too
                point.first_run = pending.first_run or run
                record.checkpoints.pop()
            elif pending is not None:
                changed = taken.changes if taken.changes is not None else snaps.changes(pending.snapshot, taken.id)
                pending.added, pending.modified, pending.removed = (
                    len(changed.added), len(changed.modified), len(changed.removed))
            record.checkpoints.append(point)
            self._retain(record, snaps, taken.store_bytes)
        except SnapshotError as exc:
            key = too_large_key(record)
            if isinstance(exc, WorkspaceTooLarge) and key:
                remember_too_large(self.settings, key, time.time(), str(exc))
            record.off = str(exc)
            return [f"Checkpoints are off for the rest of this session: {exc}"]
        return []

    def _make_room(self, record: SessionRecord, snaps: Snapshots, taking: str) -> bool:
        """Free the oldest checkpoint but the pending one (this session's, then other sessions');
        False when there is none. `taking`: the snapshot being taken, which is not one of them."""
        if len(record.checkpoints) > 1:
            snaps.free(record.checkpoints.pop(0).snapshot)
            return True
        mine = {point.snapshot for point in record.checkpoints} | {taking}
        kept, _ = snaps.kept()
        other = next((info for info in kept if info.label.startswith(LABEL) and info.id not in mine), None)
        if other is None:
            return False
        snaps.free(other.id)
        return True

    def _retain(self, record: SessionRecord, snaps: Snapshots, store_bytes: int) -> None:
        limits = self.settings.checkpoints
        while len(record.checkpoints) > max(1, limits.keep):
            snaps.release(record.checkpoints.pop(0).snapshot)
        limit = limits.max_store_mb << 20
        while store_bytes > limit and len(record.checkpoints) > 1:
            store_bytes -= snaps.free(record.checkpoints.pop(0).snapshot)
        if store_bytes > limit:  # other sessions' checkpoints of this workspace, oldest first
            mine = {point.snapshot for point in record.checkpoints}
            kept, _ = snaps.kept()
            for info in kept:
                if store_bytes <= limit:
                    break
                if info.label.startswith(LABEL) and info.id not in mine:
                    store_bytes -= snaps.free(info.id)

    def rewind(self, run: int | str) -> tuple[Checkpoint, Changes]:
        """Put the workspace back as it was before run `run` (or at the checkpoint whose snapshot id
        is `run`); the checkpoint used and what changed. The workspace as it was is kept first, as
        a checkpoint of its own (a rewind can be undone)."""
        with editing(self.path, self._fresh()) as record:
            target = record.find(run) if isinstance(run, int) else record.named(run)
            if target is None:
                runs = ", ".join(str(point.run) for point in record.checkpoints if point.run) or "none"
                raise SnapshotError(f"no checkpoint before run {run} in session {self.session} "
                                    f"(checkpoints before runs: {runs}); see herald checkpoints list")
            if record.off:
                raise SnapshotError(f"checkpoints are off for session {self.session}: {record.off}")
            where = f"before run {run}" if isinstance(run, int) else f"checkpoint {run}"
            notes = self._mark(record, 0, f"before the rewind to {where}")
            if notes:
                raise SnapshotError(notes[0])
            # A pending checkpoint whose run changed nothing was just given back: the workspace
            # already is as it was then, and the newest checkpoint holds that state.
            again = record.find(run) if isinstance(run, int) else record.named(run)
            target = again or record.checkpoints[-1]
            done = self.snapshots(record).restore(target.snapshot)
            return target, done
