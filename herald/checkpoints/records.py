"""A session's checkpoints on this machine: `<data_dir>/checkpoints/<session>.json`.

The snapshots themselves live where the workspace is (snapshots.py); this file says which
snapshot is "before run N", with what the run changed, and how to reach the backend again.
Read-modify-write under an flock: `herald checkpoints restore` may run while the session does.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import Settings

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class Checkpoint:
    """The workspace before run `run` (or before a rewind, when `run` is 0)."""

    run: int
    snapshot: str
    time: float
    title: str  # the run's first line, or what a rewind did
    # What the run changed (known once the next snapshot is taken): None until then
    added: int | None = None
    modified: int | None = None
    removed: int | None = None
    # The first run it stands before: runs that changed nothing share the next one's checkpoint
    # (0 for a rewind's own, which stands before no run)
    first_run: int = 0

    @property
    def changed(self) -> bool | None:
        if self.added is None:
            return None
        return bool(self.added or self.modified or self.removed)


@dataclass
class SessionRecord:
    session: str
    backend: str  # the backend's name: local, ssh, docker, modal
    backend_spec: str  # what opens it again (settings.backend when of its kind)
    root: str  # the workspace, on the backend
    container: str = ""  # docker.name when the container outlives the session
    runs: int = 0  # execute_code runs so far
    checkpoints: list[Checkpoint] = field(default_factory=list)  # oldest first; the last is pending
    off: str = ""  # why checkpoints are off for this session ("" : on)

    def find(self, run: int) -> Checkpoint | None:
        """The checkpoint that holds the workspace as it was before run `run`: its own, or the one
        that stands for it (a run that changed nothing shares the following one's)."""
        for point in self.checkpoints:
            if point.first_run and point.first_run <= run <= max(point.run, point.first_run):
                return point
        return None

    def named(self, snapshot: str) -> Checkpoint | None:
        """The checkpoint of snapshot `snapshot`."""
        return next((point for point in self.checkpoints if point.snapshot == snapshot), None)


def records_dir(settings: Settings) -> Path:
    return settings.data_dir / "checkpoints"


def record_path(settings: Settings, session: str) -> Path:
    return records_dir(settings) / f"{_SAFE.sub('_', session)}.json"


def _decode(data: dict[str, Any]) -> SessionRecord:
    points = [Checkpoint(**point) for point in data.pop("checkpoints", [])]
    return SessionRecord(**data, checkpoints=points)


def read_record(path: Path) -> SessionRecord | None:
    try:
        return _decode(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


@contextlib.contextmanager
def editing(path: Path, fresh: SessionRecord) -> Iterator[SessionRecord]:
    """The record at `path` (or `fresh` when there is none) to change; written back on exit."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = read_record(path) or fresh
        yield record
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(record), indent=1), encoding="utf-8")
        tmp.replace(path)


def session_records(settings: Settings) -> list[tuple[Path, SessionRecord]]:
    """Every session's record, the most recently changed first."""
    folder = records_dir(settings)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        record = read_record(path)
        if record is not None:
            found.append((path, record))
    return found


# Workspaces found past checkpoints.max_files, so later sessions skip the walk (a day, or until
# the limit is raised): `<data_dir>/checkpoints/too-large.json`, {key: {time, max_files, why}}.
TOO_LARGE_FOR = 24 * 3600.0


def too_large_key(record: SessionRecord) -> str | None:
    """What names the workspace across sessions; None where each session has a fresh one (a
    container or sandbox that goes with it)."""
    if record.backend in ("docker", "modal") and not record.container:
        return None
    return f"{record.backend_spec}|{record.container}|{record.root}"


def _too_large_path(settings: Settings) -> Path:
    return records_dir(settings) / "too-large.json"


def _too_large(settings: Settings) -> dict[str, dict[str, Any]]:
    try:
        found = json.loads(_too_large_path(settings).read_text(encoding="utf-8"))
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def seen_too_large(settings: Settings, key: str, now: float) -> str | None:
    """Why the workspace `key` was found too large lately, with this limit or a lower one; None: not."""
    found = _too_large(settings).get(key)
    if not isinstance(found, dict) or now - float(found.get("time", 0)) > TOO_LARGE_FOR:
        return None
    if int(found.get("max_files", 0)) < settings.checkpoints.max_files:
        return None  # the limit was raised since: count again
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(found["time"])))
    return f"{found.get('why', 'the workspace is too large')} (found {when}; counted again after a day)"


def remember_too_large(settings: Settings, key: str, now: float, why: str) -> None:
    found = {name: entry for name, entry in _too_large(settings).items()
             if isinstance(entry, dict) and now - float(entry.get("time", 0)) <= TOO_LARGE_FOR}
    found[key] = {"time": now, "max_files": settings.checkpoints.max_files, "why": why}
    path = _too_large_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(found, indent=1), encoding="utf-8")
    tmp.replace(path)
