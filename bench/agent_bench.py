"""Agent: tokens sent to the provider and model turns, execute_code versus direct tool calls only.

The models are scripted (tests/fakes/llm_server.py with a strategy function): one solves each task
the way a model that uses execute_code would (one script, then the answer); the other the way a
model limited to direct tool calls would (one call per turn when the next call depends on the last
result, up to 10 independent calls in one turn otherwise). Both run through the real Agent, the
real SDKs and real tools on real files, and each run is checked (files patched, answer correct).

Tokens sent = characters of every request body the provider received / 4 (no tokenizer can be
downloaded here); turns = model calls. Turns are the same in every repetition; tokens vary by a
few characters (timings inside tool results), so the table shows their median and range.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from herald import Agent, Settings
from tests.fakes.llm_server import FakeLLMServer, Protocol

from .agent_tasks import TASKS, Strategy, Task

REPEATS = 3
PROTOCOLS: tuple[Protocol, ...] = ("openai", "anthropic")


@dataclass
class Measure:
    turns: int = 0
    verified: bool = True
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def median_tokens(self) -> float:
        return statistics.median(self.tokens)


def _one(task: Task, strategy: Strategy, protocol: Protocol, work: Path) -> tuple[int, int, bool, float]:
    shutil.rmtree(work, ignore_errors=True)
    (work / "ws").mkdir(parents=True)
    task.setup(work / "ws")
    settings = Settings(data_dir=work / "data").with_overrides({"sandbox.max_tool_calls": 1000})
    with FakeLLMServer(strategy=strategy) as llm:
        started = time.perf_counter()
        with Agent(settings=settings, provider=protocol, model="scripted", base_url=llm.base_url(protocol),
                   api_key="bench", cwd=str(work / "ws"), env={}) as agent:
            result = agent.run(task.prompt)
        seconds = time.perf_counter() - started
        tokens = sum(r.approx_tokens for r in llm.requests)
    ok = result.status == "completed" and task.verify(work / "ws", result.final_text)
    return tokens, result.turns, ok, seconds


def _measure(task: Task, make: Callable[[], Strategy], protocol: Protocol, work: Path) -> Measure:
    measure = Measure()
    for n in range(REPEATS):
        tokens, turns, ok, seconds = _one(task, make(), protocol, work)
        if n and turns != measure.turns:
            raise RuntimeError(f"{task.name}: the scripted model took {turns} turns, before {measure.turns}")
        measure.turns = turns
        measure.verified = measure.verified and ok
        measure.tokens.append(tokens)
        measure.seconds.append(seconds)
    return measure


@dataclass
class Row:
    task: str
    protocol: str
    code: Measure
    direct: Measure

    @property
    def token_saving(self) -> float:
        return 1 - self.code.median_tokens / self.direct.median_tokens

    @property
    def turn_ratio(self) -> float:
        return self.direct.turns / self.code.turns

    @property
    def passed(self) -> bool:
        return self.token_saving >= 0.9 and self.turn_ratio >= 5 and self.code.verified and self.direct.verified


def run() -> list[Row]:
    work = Path(tempfile.mkdtemp(prefix="herald-agent-bench-"))
    rows = []
    try:
        for task in TASKS:
            for protocol in PROTOCOLS:
                code = _measure(task, task.code_model, protocol, work)
                direct = _measure(task, task.direct_model, protocol, work)
                rows.append(Row(task.name, protocol, code, direct))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _seconds(m: Measure) -> str:
    return f"{statistics.median(m.seconds):.2f} ({min(m.seconds):.2f}–{max(m.seconds):.2f})"


def _tokens(m: Measure) -> str:
    spread = f" ({min(m.tokens):,}–{max(m.tokens):,})" if min(m.tokens) != max(m.tokens) else ""
    return f"{m.median_tokens:,.0f}{spread}"


def print_rows(rows: list[Row]) -> None:
    table = Table(
        title="Agent: execute_code vs direct tool calls only (scripted models)",
        caption=("Scripted models via the fake LLM server, real SDKs, real tools. Tokens sent = request body "
                 "characters / 4, summed over all requests; turns = model calls. Direct-only model: up to 10 "
                 f"independent calls per turn. sandbox.max_tool_calls=1000. Tokens and wall time: median (min–max) "
                 f"of {REPEATS} runs. Target: ≥ 90 % fewer tokens and ≥ 5× fewer turns."),
    )
    for column in ("task", "API", "turns code / direct", "fewer turns", "tokens code", "tokens direct", "fewer tokens",
                   "wall s code", "wall s direct", "verified", "ok"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.task, row.protocol,
            f"{row.code.turns} / {row.direct.turns}", f"{row.turn_ratio:.1f}×",
            _tokens(row.code), _tokens(row.direct), f"{row.token_saving:.1%}",
            _seconds(row.code), _seconds(row.direct),
            "yes" if row.code.verified and row.direct.verified else "[red]NO[/]",
            "[green]yes[/]" if row.passed else "[red]NO[/]",
        )
    Console(width=200).print(table)


if __name__ == "__main__":
    print_rows(run())
