"""`herald checkpoints list|diff|restore`: a session's workspace as it was before each run.

The snapshots live where the workspace is (this machine, the SSH host, the container), so diff
and restore open the session's backend again: a container kept by name (docker.name) or an SSH
host that is reachable. A container removed with its session took its checkpoints with it; the
command says so and how to keep them next time. `restore` asks nothing (it keeps the workspace
as it was first, as a checkpoint of its own) and says what it changed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..backends.base import Backend
from ..checkpoints import Changes, SnapshotError, snapshots_for
from ..checkpoints.records import Checkpoint, SessionRecord, session_records
from ..checkpoints.session import SessionCheckpoints
from ..config import Settings
from .common import BackendUnavailable, UsageError, console, escape, load, open_backend

SHOWN_PATHS = 20  # per kind, in the text of a restore


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    p = sub.add_parser("checkpoints", parents=parents,
                       help="list, diff or restore the workspace as it was before a session's runs")
    verbs = p.add_subparsers(dest="verb", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--session", default="last",
                        help="the session: its id, a unique prefix, or 'last' (default: the last one with checkpoints)")
    common.add_argument("--json", action="store_true", help="print JSON")
    verbs.add_parser("list", parents=[*parents, common], help="the checkpoints, with what each run changed")
    d = verbs.add_parser("diff", parents=[*parents, common], help="a unified diff from before run N to now")
    d.add_argument("run", help="the run (or a checkpoint's id): the diff starts from the workspace before it")
    d.add_argument("--to", metavar="M", help="end at the workspace before run M (or checkpoint M) instead of now")
    d.add_argument("--max-bytes", type=int, default=200_000, help="cut the diff there (default 200000)")
    r = verbs.add_parser("restore", parents=[*parents, common], help="put the workspace back as it was before run N")
    r.add_argument("run", help="the run to go back before, or a checkpoint: its id, or @ and the end "
                               "`list` shows (e.g. the one before a rewind)")
    p.set_defaults(func=cmd_checkpoints)


def find_record(settings: Settings, session: str) -> SessionRecord:
    """The record of `session` (an id, a unique prefix or 'last'); UsageError saying what exists."""
    found = session_records(settings)
    if not found:
        raise UsageError(f"no checkpoints in {settings.data_dir / 'checkpoints'} yet: a session's runs leave them")
    if session == "last":
        return found[0][1]
    exact = [record for _, record in found if record.session == session]
    matches = exact or [record for _, record in found if record.session.startswith(session)]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(record.session for _, record in found[:5])
    what = "is ambiguous" if matches else "matches no session with checkpoints"
    raise UsageError(f"--session {session} {what} (the latest: {known}); pass more of the id")


@contextmanager
def session_backend(settings: Settings, record: SessionRecord) -> Iterator[Backend]:
    """The session's backend opened again, in its workspace; UsageError / BackendUnavailable
    saying how to reach it when it cannot be."""
    if record.backend == "modal" or (record.backend == "docker" and not record.container):
        place = "Modal sandbox" if record.backend == "modal" else "Docker container"
        keep = " Set docker.name (HERALD_DOCKER_NAME) to keep the container, and its checkpoints, after a session." \
            if record.backend == "docker" else ""
        raise UsageError(f"the checkpoints of session {record.session} lived in its {place}, which ended with the "
                         f"session: there is nothing left to restore from.{keep}")
    tuned = settings.with_overrides({"docker.name": record.container} if record.container else {},
                                    source=f"session {record.session}")
    try:
        backend = open_backend(record.backend_spec, tuned, record.root, where=f"the session's workspace {record.root}",
                               check_remote_cwd=True)
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"{exc} -- the checkpoints of session {record.session} are there: try again once "
                                 "it is reachable") from None
    try:
        yield backend
    finally:
        backend.close()


def _point(record: SessionRecord, run: int | str) -> Checkpoint:
    if isinstance(run, str) and not run.isdigit():  # a checkpoint's id (a rewind's has no run), or @ and its end
        tail = run[1:] if run.startswith("@") else None
        named = [p for p in record.checkpoints if p.snapshot.endswith(tail)] if tail else \
            [p for p in record.checkpoints if p.snapshot.startswith(run)]
        if len(named) != 1:
            raise UsageError(f"session {record.session} has {'no' if not named else 'more than one'} checkpoint "
                             f"{run}: see herald checkpoints list --session {record.session}")
        return named[0]
    run = int(run)
    point = record.find(run)
    if point is None:
        runs = ", ".join(str(p.run) for p in record.checkpoints if p.run) or "none"
        raise UsageError(f"session {record.session} has no checkpoint before run {run} (it has: {runs}; "
                         f"{record.runs} runs in all)")
    return point


def _changes_text(point: Checkpoint) -> str:
    if point.added is None:
        return "(pending: the next run tells)"
    if not point.changed:
        return "nothing"
    return f"+{point.added} ~{point.modified} -{point.removed}"


def list_checkpoints(settings: Settings, record: SessionRecord, *, as_json: bool) -> int:
    if as_json:
        print(json.dumps(dataclasses.asdict(record), indent=2, ensure_ascii=False))
        return 0
    out = console()
    out.print(escape(f"Session {record.session} on {record.backend} ({record.root}), {record.runs} runs"))
    if record.off:
        out.print(escape(f"Checkpoints are off for it: {record.off}"), style="yellow")
    for point in record.checkpoints:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(point.time))
        name = f"before run {point.run}" if point.run else "before a rewind"
        out.print(escape(f"{name:<16} {when}  @{point.snapshot[-4:]}  changed since: {_changes_text(point):<20} "
                         f"{point.title}"))
    if record.checkpoints:
        out.print(escape(f"Restore with: herald checkpoints restore N --session {record.session}"), style="dim")
    return 0


def changes_json(changes: Changes) -> dict[str, Any]:
    return {key: list(value) for key, value in dataclasses.asdict(changes).items()}


def describe_restore(record: SessionRecord, point: Checkpoint, done: Changes) -> str:
    """What a restore did, for the person and for the model's history."""
    when = f"before run {point.run}" if point.run else f"checkpoint {point.snapshot} ({point.title})"
    text = [f"Restored {record.root} to {when} (session {record.session}): "
            f"{len(done.modified)} rewritten, {len(done.added)} recreated, {len(done.removed)} removed."]
    for label, paths in (("rewritten", done.modified), ("recreated", done.added), ("removed", done.removed),
                         ("left as they are (not covered by a limit)", done.not_covered)):
        if paths:
            more = f" and {len(paths) - SHOWN_PATHS} more" if len(paths) > SHOWN_PATHS else ""
            text.append(f"  {label}: {', '.join(paths[:SHOWN_PATHS])}{more}")
    if not done:
        text.append("  The workspace already was as it was then.")
    return "\n".join(text)


def restore_to(settings: Settings, record: SessionRecord, run: int | str) -> tuple[Checkpoint, Changes]:
    """The session's workspace put back as it was before run `run` (or at checkpoint `run`, an id),
    its backend opened again."""
    point = _point(record, run)
    with session_backend(settings, record) as backend:
        points = SessionCheckpoints(backend, settings, record.session, root=record.root,
                                    backend_spec=record.backend_spec)
        try:
            return points.rewind(point.run if point.run else point.snapshot)
        except SnapshotError as exc:
            raise BackendUnavailable(str(exc)) from None


REWIND = "/rewind"


def rewind_command(settings: Settings, task: str, session: str | None, *, as_json: bool) -> int:
    """`herald run --resume ID "/rewind [N]"`: the agent session's workspace put back as it was
    before run N (default: its last run), said to the person and added to the session's history,
    so the model knows on its next turn. No model is called."""
    from ..agent.sessions import Session, SessionNotFound, find_session

    words = task.split()
    if words[0] != REWIND or len(words) > 2 or (len(words) == 2 and not words[1].isdigit()):
        raise UsageError(f"{REWIND} takes at most a run number: {REWIND} [N] (default: the last run)")
    if session is None:
        raise UsageError(f'{REWIND} rewinds a session: herald run --resume ID "{REWIND} [N]"')
    try:
        path = find_session(settings.sessions_dir, session)
    except SessionNotFound as exc:
        raise UsageError(str(exc)) from None
    record = find_record(settings, path.stem)
    run = int(words[1]) if len(words) == 2 else record.runs
    point, done = restore_to(settings, record, run)
    text = describe_restore(record, point, done)
    history = Session(settings.sessions_dir, path.stem)
    try:
        history.record("rewind", run=run, snapshot=point.snapshot, **changes_json(done))
        history.message({"role": "user", "content": f"[Herald] The person rewound the workspace. {text}"})
    finally:
        history.close()
    if as_json:
        print(json.dumps({"session": record.session, "run": run, "snapshot": point.snapshot, **changes_json(done)}))
    else:
        console().print(escape(text))
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    settings = load(args)
    record = find_record(settings, args.session)
    if args.verb == "list":
        return list_checkpoints(settings, record, as_json=args.json)
    if args.verb == "diff":
        since = _point(record, args.run)
        until = _point(record, args.to).snapshot if args.to is not None else None
        with session_backend(settings, record) as backend:
            try:
                snaps = snapshots_for(backend, record.root, settings)
                text = snaps.diff(since.snapshot, until, max_bytes=args.max_bytes)
            except SnapshotError as exc:
                raise BackendUnavailable(str(exc)) from None
        if args.json:
            print(json.dumps({"session": record.session, "since": since.snapshot, "until": until, "diff": text}))
        else:
            print(text, end="" if text.endswith("\n") or not text else "\n")
        return 0
    point, done = restore_to(settings, record, args.run)
    if args.json:
        print(json.dumps({"session": record.session, "run": point.run, "snapshot": point.snapshot,
                          **changes_json(done)}))
    else:
        console().print(escape(describe_restore(record, point, done)))
    return 0
