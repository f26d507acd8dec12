"""Collect samples per metric and print them as one table: median, min–max, target, verdict."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table


@dataclass
class Metric:
    name: str
    unit: str  # "ms" or "s"
    target: float | None  # upper bound, same unit; None: reported only
    samples: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def passed(self) -> bool | None:
        return None if self.target is None else self.median <= self.target


def _fmt(value: float, unit: str) -> str:
    if unit == "ms" and value < 1:
        return f"{value * 1000:.0f} µs"
    return f"{value:.3f} {unit}" if value < 10 else f"{value:.1f} {unit}"


def print_table(title: str, metrics: list[Metric]) -> None:
    table = Table(title=title)
    for column in ("metric", "median", "min – max", "n", "target", "ok", "note"):
        table.add_column(column)
    for m in metrics:
        verdict = {True: "[green]yes[/]", False: "[red]NO[/]", None: "-"}[m.passed]
        table.add_row(
            m.name,
            _fmt(m.median, m.unit),
            f"{_fmt(min(m.samples), m.unit)} – {_fmt(max(m.samples), m.unit)}",
            str(len(m.samples)),
            f"≤ {_fmt(m.target, m.unit)}" if m.target is not None else "-",
            verdict,
            m.note,
        )
    Console(width=160).print(table)
