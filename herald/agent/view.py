"""The live terminal view of `herald run`: model streaming, each tool call, a script's progress
(execute_code's inner calls and elapsed time while it runs), the final answer and the usage.

The view runs on stderr so that stdout carries only the final answer. Events arrive from the
agent's threads; one lock keeps the state consistent. While an approval question is on the
terminal (`suspended()`), the live region is taken down and lines to print wait for the answer.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from .events import (
    AgentEvent,
    AgentResult,
    InnerToolCall,
    ModelCallFinished,
    ModelCallStarted,
    Notice,
    ToolFinished,
    ToolStarted,
)
from .providers.base import TextDelta, ToolCallDelta

STREAM_LINES = 6


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A console that wraps to a terminal's width, and never hard-wraps piped output (logs and
    grep see whole lines)."""
    stream = file or (sys.stderr if stderr else sys.stdout)
    # emoji=False: text such as "custom:m:" (a provider:model label) prints as written, not as "customⓂ"
    if stream.isatty():
        return Console(file=file, stderr=stderr, highlight=False, emoji=False)
    return Console(file=file, stderr=stderr, highlight=False, emoji=False, soft_wrap=True, width=10_000)


def _args_preview(arguments: dict[str, Any], runs_script: bool, limit: int = 80) -> str:
    if runs_script and isinstance(arguments.get("code"), str):  # a script: its size, not its text
        lines = arguments["code"].count("\n") + 1
        return f"{lines} line script"
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AgentView:
    def __init__(self, console: Console | None = None, profile: str = "") -> None:
        self.console = console or make_console(stderr=True)
        # A permission profile other than the default is named while it runs and in the summary.
        self._profile = f" · profile {profile}" if profile and profile != "workspace-write" else ""
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._streamed = ""
        self._status = "starting"
        self._running: dict[str, tuple[str, float, bool]] = {}  # call id -> tool name, start time, runs a script
        self._inner = 0
        self._building: dict[int, tuple[str, int]] = {}  # tool calls being streamed: name, argument size
        self._suspended = False
        self._held: list[RenderableType] = []  # printed while a question was on screen

    # -- live region ---------------------------------------------------------------------------

    def __rich__(self) -> RenderableType:
        with self._lock:
            parts: list[RenderableType] = []
            if self._streamed.strip():
                tail = "\n".join(self._streamed.strip().splitlines()[-STREAM_LINES:])
                parts.append(Text(tail, style="italic"))
            for name, size in self._building.values():
                parts.append(Text(f"  composing {name or 'tool call'} ({size} chars)", style="dim"))
            for name, started, runs_script in self._running.values():
                extra = f" · {self._inner} inner call(s)" if runs_script else ""
                parts.append(Text(f"⚙ {name}{extra} · {time.monotonic() - started:.1f} s", style="cyan"))
            if not self._running:
                parts.append(Text(f"… {self._status}{self._profile}", style="dim"))
            return Group(*parts)

    def __enter__(self) -> AgentView:
        self._live = Live(self, console=self.console, refresh_per_second=8, transient=True)
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def _print(self, renderable: RenderableType) -> None:
        with self._lock:
            if self._suspended:
                self._held.append(renderable)
                return
        self.console.print(renderable)

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """While a question is asked on the terminal: no live region, printing held back."""
        live = self._live
        with self._lock:
            self._suspended = True
        if live is not None:
            live.stop()
        try:
            yield
        finally:
            with self._lock:
                self._suspended = False
                held, self._held = self._held, []
            for item in held:
                self.console.print(item)
            if live is not None and self._live is live:
                live.start()

    # -- events --------------------------------------------------------------------------------

    def handle(self, event: AgentEvent) -> None:
        printed: list[RenderableType] = []
        with self._lock:
            if isinstance(event, ModelCallStarted):
                self._status = f"turn {event.turn}: waiting for {event.provider}:{event.model}"
                self._streamed, self._building = "", {}
            elif isinstance(event, TextDelta):
                self._streamed += event.text
                self._status = "model is writing"
            elif isinstance(event, ToolCallDelta):
                name, size = self._building.get(event.index, ("", 0))
                self._building[event.index] = (name or event.name or "", size + len(event.arguments))
            elif isinstance(event, ModelCallFinished):
                if event.tool_calls and event.text.strip():
                    printed.append(Text(event.text.strip(), style="italic dim"))
                self._streamed, self._building = "", {}
                self._status = "running tools" if event.tool_calls else "done"
            elif isinstance(event, ToolStarted):
                self._running[event.call_id] = (event.name, time.monotonic(), event.runs_script)
                if event.runs_script:
                    self._inner = 0
                printed.append(
                    Text(f"→ {event.name}({_args_preview(event.arguments, event.runs_script)})", style="bold")
                )
            elif isinstance(event, InnerToolCall):
                self._inner = event.count
            elif isinstance(event, ToolFinished):
                _, _, runs_script = self._running.pop(event.call_id, ("", 0.0, False))
                mark = "[green]✓[/]" if event.ok else "[red]✗[/]"
                inner = f" · {event.inner_calls} inner call(s)" if runs_script else ""
                printed.append(f"{mark} [bold]{escape(event.name)}[/]{inner} · {event.seconds:.2f} s · "
                               f"[dim]{escape(event.summary)}[/]")
            elif isinstance(event, Notice):
                printed.append(f"[yellow]! {event.kind}:[/] {escape(event.text)}")
        for item in printed:
            self._print(item)

    # -- the end -------------------------------------------------------------------------------

    def summary(self, result: AgentResult) -> None:
        style = {"completed": "green", "budget_exhausted": "yellow", "interrupted": "yellow"}.get(result.status, "red")
        usage = result.usage
        cached = f" ({usage.cache_read_tokens:,} cached)" if usage.cache_read_tokens else ""
        written = f", {usage.cache_write_tokens:,} cache writes" if usage.cache_write_tokens else ""
        self._print(
            f"[{style}]{result.status}[/] · {result.turns} turn(s) · {len(result.tool_calls)} tool call(s) · "
            f"tokens in {usage.input_tokens:,}{cached}{written}, out {usage.output_tokens:,} · "
            f"{result.seconds:.1f} s · session {escape(result.session_id)}{self._profile}"
        )


def print_answer(console: Console, result: AgentResult) -> None:
    """The final answer, on stdout (plain when piped)."""
    if console.is_terminal:
        console.print(Panel(escape(result.final_text or "(no answer)"), title="answer", border_style="green"))
    else:
        console.print(result.final_text, markup=False, highlight=False, soft_wrap=True)
