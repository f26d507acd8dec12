"""`herald run` and `herald sessions`: the command-line side of the agent (parsing stays in
herald/cli). Exit codes of `herald run`: 0 answered, 1 the model call failed or the backend
cannot be reached, 3 the turn budget ran out (a summary was given), 130 interrupted (Ctrl-C).

Order of checks, so the first error shown is the one to fix and nothing is started for a run
that cannot happen: the session (`--resume`), then the provider (keys, model), then the backend
and its working directory (connected, so an unreachable host fails here, not mid-task).

`--resume ID` continues a session with the provider, model, base URL, backend and working
directory it last ran with; what the person chose on this command line (`explicit`) wins.

`--plan` runs read-only and asks the model for a plan, which is the answer; `--resume ID
--profile workspace-write "go ahead"` then carries it out. On a terminal (stdin a TTY, CI not
set) calls an `ask` rule stops are asked about (policy/approvals.py), with the live view paused.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Collection
from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..agent.jsonevents import JsonEvents
from ..agent.loop import Agent
from ..agent.providers.resolve import ProviderSetupError, resolve_fallbacks, resolve_primary
from ..agent.sessions import (
    SessionNotFound,
    SessionState,
    find_session,
    list_sessions,
    read_session,
)
from ..agent.view import AgentView, make_console, print_answer
from ..backends.base import Backend
from ..config import ConfigError, Settings
from ..keys import herald_environ
from ..policy import READ_ONLY, Policy
from ..policy.approvals import interrupting, terminal_approvals
from .checkpoints import REWIND, rewind_command
from .common import BackendUnavailable, UsageError, open_backend
from .signals import stop_signals

EXIT_CODES = {"completed": 0, "error": 1, "budget_exhausted": 3, "interrupted": 130}
BACKEND_UNAVAILABLE = 1
# The settings a resumed session brings back (unless chosen again on the command line).
RESUMED_KEYS = ("agent.provider", "agent.model", "agent.base_url", "agent.api_mode", "backend")


class CommandUsageError(Exception):
    """Something the person running herald must fix; the message says what."""


class BackendUnavailableError(Exception):
    """The backend cannot be reached or started; the message says why (exit 1)."""


# -- resuming -----------------------------------------------------------------------------------


def _value(settings: Settings, key: str) -> Any:
    target: Any = settings
    for part in key.split("."):
        target = getattr(target, part)
    return target


def resume_setup(
    settings: Settings, state: SessionState, *, explicit: Collection[str] | None, cwd: str | None
) -> tuple[Settings, str | None]:
    """Settings and working directory to continue `state` with.

    `explicit`: the dotted setting keys given on this command line (flags and `-c`); None when
    unknown, and then every setting that differs from its default counts as chosen. A chosen
    provider that is not the session's drops the session's model, base URL and API mode too
    (they belong to the other provider). The session's directory is reused only on the session's
    own backend and when no --cwd was given."""
    saved = state.resume_settings()
    defaults = Settings()
    chosen = set(explicit) if explicit is not None else {
        key for key in RESUMED_KEYS if _value(settings, key) != _value(defaults, key)
    }
    other_provider = "agent.provider" in chosen and settings.agent.provider != saved.get("agent.provider")
    overrides = {
        key: value for key, value in saved.items()
        if key not in chosen and not (other_provider and key.startswith("agent."))
    }
    try:
        resumed = settings.with_overrides(overrides, source=f"session {state.id}")
    except ConfigError as exc:  # a session file edited by hand
        raise CommandUsageError(str(exc)) from None
    if cwd is None and state.cwd is not None and _kind(resumed.backend) == state.setup.get("backend", "local"):
        cwd = state.cwd
    return resumed, cwd


def _kind(spec: str) -> str:
    """The backend name a spec opens: local, docker, ssh, modal."""
    return (spec.split(":", 1)[0].strip().lower() or "local") if spec else "local"


# -- the backend --------------------------------------------------------------------------------


def open_run_backend(spec: str, settings: Settings, cwd: str | None, *, from_session: bool = False) -> Backend:
    """The backend `spec` names, connected, with `cwd` checked where it matters: on this machine
    for the local backend, on the host / in the container for the others."""
    where = f"the session's working directory {cwd}" if from_session else f"--cwd {cwd}"
    fix = " (pass --cwd to continue the session elsewhere)" if from_session else ""
    try:
        return open_backend(spec, settings, cwd, where=where, fix=fix, check_remote_cwd=True)
    except UsageError as exc:
        raise CommandUsageError(str(exc)) from None
    except BackendUnavailable as exc:
        raise BackendUnavailableError(str(exc)) from None


# -- herald run ---------------------------------------------------------------------------------


def run_command(
    settings: Settings,
    *,
    task: str | None,
    resume: str | None,
    cwd: str | None,
    as_json: bool,
    explicit: Collection[str] | None = None,
    out: IO[str] | None = None,
    plan: bool = False,
) -> int:
    """`herald run`. `explicit`: the dotted setting keys this command line set (see
    `resume_setup`). `out`: where the answer (or, with `as_json`, the JSON lines) go."""
    out = out or sys.stdout
    if task and task.split()[:1] == [REWIND]:  # a command for Herald, not a task for the model
        return rewind_command(settings, task, resume, as_json=as_json)
    if not task and not resume:
        raise CommandUsageError('pass a task: herald run "what to do" (or --resume ID to continue a session)')
    if plan:
        if settings.policy.profile != READ_ONLY and "policy.profile" in (explicit or ()):
            raise CommandUsageError(f"--plan runs read-only: drop --profile {settings.policy.profile} (use it "
                                    "with --resume to carry the plan out)")
        settings = settings.with_overrides({"policy.profile": READ_ONLY}, source="--plan")
    state: SessionState | None = None
    if resume is not None:
        try:
            state = read_session(find_session(settings.sessions_dir, resume))
        except SessionNotFound as exc:
            raise CommandUsageError(str(exc)) from None
        if not task and state.messages and _answered(state):
            raise CommandUsageError(
                f"nothing to continue: session {state.id} ended with an answer; pass a task: "
                f'herald run --resume {state.id} "follow-up"'
            )
        settings, cwd = resume_setup(settings, state, explicit=explicit, cwd=cwd)
    try:  # the Agent resolves them again; here only to fail before a backend is started
        resolve_primary(settings.agent, herald_environ())
        resolve_fallbacks(settings.agent, herald_environ())
    except ProviderSetupError as exc:
        raise CommandUsageError(str(exc)) from None
    try:
        backend = open_run_backend(settings.backend, settings, cwd, from_session=state is not None and cwd == state.cwd)
    except BackendUnavailableError as exc:
        make_console(stderr=True).print(f"[red]herald: {escape(str(exc))}[/]")
        return BACKEND_UNAVAILABLE
    try:
        return _run(settings, backend, task=task, session=state.id if state else None, as_json=as_json, out=out,
                    plan=plan)
    finally:
        backend.close()


def _answered(state: SessionState) -> bool:
    last = state.messages[-1]
    return last.get("role") == "assistant" and not last.get("tool_calls")


def _run(settings: Settings, backend: Backend, *, task: str | None, session: str | None, as_json: bool,
         out: IO[str], plan: bool = False) -> int:
    stream = JsonEvents(out) if as_json else None
    view = None if as_json else AgentView(profile=settings.policy.profile)
    on_event = stream.handle if stream is not None else view.handle if view is not None else None
    approvals = terminal_approvals()
    if approvals is not None and view is not None:
        approvals.pause = view.suspended
    try:
        policy = Policy.from_settings(settings, approve=approvals)
        agent = Agent(settings=settings, backend=backend, session=session, on_event=on_event, policy=policy,
                      plan=plan)
    except (ValueError, SessionNotFound) as exc:  # no provider, bad fallback, unknown tool, bad rule
        raise CommandUsageError(str(exc)) from None
    # SIGINT, SIGTERM and SIGHUP all interrupt the agent (the running call and script are killed,
    # the session is saved); a second Ctrl-C stops herald itself.
    with stop_signals() as stop:
        stop.interrupt = interrupting(agent.interrupt, approvals)
        try:
            if view is not None:
                with view:
                    result = agent.run(task)
            else:
                result = agent.run(task)
        except ValueError as exc:  # --resume of a finished session without a follow-up task
            raise CommandUsageError(f"{exc} (session {agent.session_id})") from None
        finally:
            if approvals is not None:
                approvals.close()
            agent.close()
    if stream is not None:
        stream.finish(result)
    else:
        assert view is not None
        print_answer(make_console(file=out), result)
        view.summary(result)
        if plan and result.status == "completed":
            make_console(stderr=True).print(escape(
                f"Plan mode: nothing was changed. To carry the plan out: herald run --resume {result.session_id} "
                '--profile workspace-write "go ahead"'), style="dim")
    if result.status == "interrupted" and stop.exit_code is not None:
        return stop.exit_code  # 130, 143 or 129: which signal stopped it
    return EXIT_CODES[result.status]


def sessions_command(settings: Settings, *, as_json: bool, limit: int) -> int:
    infos = list_sessions(settings.sessions_dir)[:limit]
    if as_json:
        records = [{**dataclasses.asdict(i), "path": str(i.path)} for i in infos]
        print(json.dumps(records, ensure_ascii=False, indent=2))
        return 0
    console = Console(highlight=False, emoji=False)  # a model named "x:cat:1" is listed as written
    if not infos:
        console.print(escape(f'No sessions in {settings.sessions_dir} yet: start one with herald run "task".'))
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
    # Table cells and captions are read as markup: a task about `Optional[str]` must stay whole.
    table = Table(caption=escape(f"in {settings.sessions_dir}"))
    for column in ("id", "started", "model", "turns", "status"):
        table.add_column(column, no_wrap=True, overflow="ellipsis" if column == "model" else "fold")
    table.add_column("task", overflow="ellipsis", ratio=1, min_width=12)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    console.print(escape('Continue one with: herald run --resume ID ["follow-up"]'), style="dim")
    return 0
