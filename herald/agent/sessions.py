"""Session transcripts: one JSONL file per session in `<data_dir>/sessions/`.

Records (one JSON object per line, each with `type` and `ts`):
    session       id, provider, model, api_mode, base_url, backend (name), backend_spec, cwd
                  (first line)
    resume        the same fields, as a resumed run set them up
    run_start     task                       run_end   status, final, turns, usage, seconds
    message       one history message        history   the whole history after a compaction
    model_call    turn, provider, model, seconds, usage, stop_reason
    model_error   reason, status, message, action (retry | compress | fallback | give_up)
    tool_call     a model's tool call: tool, args, duration_ms, result size or error
    sandbox_tool_call   a call made from inside an execute_code script
    todo          the todo list after a write
Resuming replays `message`/`history` records into the history and takes the last todo list.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..transcript import Transcript
from .providers.base import Message, Usage


class SessionNotFound(LookupError):
    """No session matches the id; the message lists how to find one."""


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class Session:
    """An open session file that records are appended to."""

    def __init__(self, directory: Path, session_id: str) -> None:
        self.id = session_id
        self.path = directory / f"{session_id}.jsonl"
        self.transcript = Transcript(self.path)

    def record(self, kind: str, **fields: Any) -> None:
        self.transcript.write({"type": kind, **fields})

    def message(self, message: Message) -> None:
        self.record("message", message=message)
        self.transcript.flush()

    def close(self) -> None:
        self.transcript.close()


@dataclass
class SessionState:
    """What a session file holds, as needed to resume it."""

    id: str
    meta: dict[str, Any]
    messages: list[Message] = field(default_factory=list)
    todos: list[dict[str, str]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    runs: int = 0
    status: str = "incomplete"  # the last run's status; incomplete when it never ended
    task: str = ""  # the first task
    final: str = ""
    setup: dict[str, Any] = field(default_factory=dict)  # provider, model, backend, cwd: as last run

    def resume_settings(self) -> dict[str, str]:
        """The settings this session last ran with, as dotted keys (what `--resume` reuses):
        agent.provider, agent.model, agent.base_url, agent.api_mode, backend. Missing in old
        session files: left out."""
        keys = {"provider": "agent.provider", "model": "agent.model", "base_url": "agent.base_url",
                "api_mode": "agent.api_mode", "backend_spec": "backend"}
        saved = {key: str(self.setup[name]) for name, key in keys.items() if self.setup.get(name)}
        if "backend" not in saved and self.setup.get("backend") in ("local", "docker", "modal"):
            saved["backend"] = str(self.setup["backend"])  # older files: the name is a spec for these
        return saved

    @property
    def cwd(self) -> str | None:
        value = self.setup.get("cwd")
        return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class SessionInfo:
    id: str
    path: Path
    started: float
    updated: float
    provider: str
    model: str
    task: str
    turns: int
    status: str


def _records(path: Path) -> list[dict[str, Any]]:
    records = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:  # a line cut by a crash: skip it, keep the rest
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def read_session(path: Path) -> SessionState:
    records = _records(path)
    meta = next((r for r in records if r.get("type") == "session"), {})
    state = SessionState(id=path.stem, meta=meta)
    for record in records:
        kind = record.get("type")
        if kind == "message" and isinstance(record.get("message"), dict):
            state.messages.append(record["message"])
        elif kind == "history" and isinstance(record.get("messages"), list):
            state.messages = list(record["messages"])
        elif kind in ("session", "resume"):
            fields = ("provider", "model", "api_mode", "base_url", "backend", "backend_spec", "cwd")
            state.setup.update({k: record[k] for k in fields if k in record})
        elif kind == "todo" and isinstance(record.get("todos"), list):
            state.todos = record["todos"]
        elif kind == "run_start":
            state.runs += 1
            state.status = "incomplete"
            state.task = state.task or str(record.get("task") or "")
        elif kind == "run_end":
            state.status = str(record.get("status", "completed"))
            state.final = str(record.get("final") or "")
            state.turns += int(record.get("turns", 0))
            state.usage.add(Usage.from_dict(record.get("usage") or {}))
    return state


def find_session(directory: Path, ref: str) -> Path:
    """`ref`: a session id, a unique prefix of one, or `last`."""
    paths = sorted(directory.glob("*.jsonl")) if directory.is_dir() else []
    if not paths:
        raise SessionNotFound(
            f"no such session {ref!r}: there are no saved sessions in {directory} yet (start one with "
            '`herald run "task"`; `herald sessions` lists them)'
        )
    if ref == "last":
        return max(paths, key=lambda p: p.stat().st_mtime)
    exact = directory / f"{ref}.jsonl"
    if exact in paths:
        return exact
    matches = [p for p in paths if p.stem.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise SessionNotFound(
            f"session id {ref!r} is ambiguous: it starts {', '.join(p.stem for p in matches[:5])}; "
            "give more of the id (`herald sessions` lists them)"
        )
    raise SessionNotFound(f"no such session {ref!r} in {directory}: `herald sessions` lists the saved ones")


def list_sessions(directory: Path) -> list[SessionInfo]:
    infos = []
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        try:
            state = read_session(path)
            stat = path.stat()
        except OSError:
            continue
        if not state.meta:  # not a session file (or one cut before its first line was written)
            continue
        infos.append(
            SessionInfo(
                id=state.id,
                path=path,
                started=float(state.meta.get("ts", stat.st_mtime)),
                updated=stat.st_mtime,
                provider=str(state.meta.get("provider", "")),
                model=str(state.meta.get("model", "")),
                task=state.task,
                turns=state.turns,
                status=state.status,
            )
        )
    return sorted(infos, key=lambda i: i.started, reverse=True)
