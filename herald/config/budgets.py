"""The names of the per-script budgets and the check of their limits: the settings
(`sandbox.budgets`) and `Runtime.execute(budgets=)` take them; policy/budgets.py counts them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BUDGETS = ("reply_bytes", "tool_seconds", "web_calls", "browser_actions", "bytes_written")


def check_budgets(limits: Mapping[str, Any]) -> dict[str, float]:
    """`limits` as numbers; ValueError names an unknown budget or a bad limit."""
    checked: dict[str, float] = {}
    for name, value in limits.items():
        if name not in BUDGETS:
            raise ValueError(f"unknown budget {name!r}: known budgets are {', '.join(BUDGETS)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"budget {name} must be a number, 0 or more, got {value!r}")
        checked[name] = float(value)
    return checked
