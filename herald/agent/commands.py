"""`herald run` and `herald sessions`: the command-line side of the agent (parsing stays in
herald/cli.py). Exit codes of `herald run`: 0 answered, 1 the model call failed, 3 the turn
budget ran out (a summary was given), 130 interrupted (Ctrl-C)."""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..config import Settings
from .events import AgentResult
from .loop import Agent
from .sessions import SessionNotFound, list_sessions
from .view import AgentView, print_answer

EXIT_CODES = {"completed": 0, "error": 1, "budget_exhausted": 3, "interrupted": 130}


class CommandUsageError(Exception):
    """Something the person running herald must fix; the message says what."""


def _open_agent(settings: Settings, *, cwd: str | None, resume: str | None, view: AgentView | None) -> Agent:
    try:
        return Agent(settings=settings, cwd=cwd, session=resume, on_event=view.handle if view else None)
    except (ValueError, SessionNotFound) as exc:  # no provider, bad fallback, unknown tool or backend
        raise CommandUsageError(str(exc)) from None


def run_command(settings: Settings, *, task: str | None, resume: str | None, cwd: str | None, as_json: bool) -> int:
    if not task and not resume:
        raise CommandUsageError('pass a task: herald run "what to do" (or --resume ID to continue a session)')
    view = None if as_json else AgentView()
    agent = _open_agent(settings, cwd=cwd, resume=resume, view=view)
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        agent.interrupt()
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C stops herald itself

    try:
        signal.signal(signal.SIGINT, on_sigint)
        try:
            if view is not None:
                with view:
                    result = agent.run(task)
            else:
                result = agent.run(task)
        except ValueError as exc:  # --resume of a finished session without a follow-up task
            raise CommandUsageError(f"{exc} (session {agent.session_id})") from None
    finally:
        signal.signal(signal.SIGINT, previous)
        agent.close()
    if as_json:
        print(json.dumps(_result_json(result), ensure_ascii=False, indent=2))
    else:
        assert view is not None
        print_answer(Console(highlight=False), result)
        view.summary(result)
    return EXIT_CODES[result.status]


def _result_json(result: AgentResult) -> dict[str, Any]:
    return {
        "status": result.status,
        "final_text": result.final_text,
        "session_id": result.session_id,
        "turns": result.turns,
        "usage": result.usage.to_dict(),
        "tool_calls": [dataclasses.asdict(c) for c in result.tool_calls],
        "error": result.error,
        "seconds": result.seconds,
    }


def sessions_command(settings: Settings, *, as_json: bool, limit: int) -> int:
    infos = list_sessions(settings.sessions_dir)[:limit]
    if as_json:
        records = [{**dataclasses.asdict(i), "path": str(i.path)} for i in infos]
        print(json.dumps(records, ensure_ascii=False, indent=2))
        return 0
    console = Console(highlight=False)
    if not infos:
        console.print(f'No sessions in {settings.sessions_dir} yet: start one with herald run "task".')
        return 0
    rows = [
        (i.id, time.strftime("%Y-%m-%d %H:%M", time.localtime(i.started)), f"{i.provider}:{i.model}",
         str(i.turns), i.status, i.task if len(i.task) <= 60 else i.task[:59] + "…")
        for i in infos
    ]
    if not console.is_terminal:  # piped: one tab-separated line per session, for grep and cut
        for row in rows:
            print("\t".join(" ".join(field.split()) for field in row))
        return 0
    table = Table(caption=f"in {settings.sessions_dir}")
    for column in ("id", "started", "model", "turns", "status"):
        table.add_column(column, no_wrap=True, overflow="ellipsis" if column == "model" else "fold")
    table.add_column("task", overflow="ellipsis", ratio=1, min_width=12)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(escape('Continue one with: herald run --resume ID ["follow-up"]'), style="dim")
    return 0
