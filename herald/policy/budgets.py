"""Per-script budgets beyond the call count (`sandbox.budgets`, `Runtime.execute(budgets=)`).

| budget | counts | checked |
|---|---|---|
| `reply_bytes` | bytes of tool replies sent to the script | a reply that would pass it is replaced by the error |
| `tool_seconds` | wall-clock seconds the script's tool calls took, in all | calls after it is used up are refused |
| `web_calls` | calls of web tools (`web_*`) | before the call |
| `browser_actions` | calls of tools that drive the browser (they touch it) | before the call |
| `bytes_written` | UTF-8 bytes of `content` / `new_string` of tools that change files | before the call |

An exhausted budget is a tool error of type `BudgetExhausted` the script can catch (it keeps
running); the result's `budgets` says the limit and the use of each budget set.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..config.budgets import BUDGETS, check_budgets
from ..tools.resources import BROWSER

if TYPE_CHECKING:
    from ..tools.registry import Tool

_WRITTEN_ARGS = ("content", "new_string")


def _drives_browser(tool: Tool) -> bool:
    try:
        return any(r.key == BROWSER for r in tool.resources({}, None))  # type: ignore[arg-type]  # probed without a context
    except Exception:
        return False


class Budgets:
    """One run's budgets: what is left, taken by the Dispatcher as a script's calls go."""

    def __init__(self, limits: Mapping[str, Any]) -> None:
        self.limits = check_budgets(limits)
        self.used = dict.fromkeys(self.limits, 0.0)
        self.hit: set[str] = set()  # budgets that refused a call
        self._lock = threading.Lock()

    def _exhausted(self, name: str, what: str) -> str:
        self.hit.add(name)
        limit = self.limits[name]
        return (f"Budget {name} ({limit:g}) exhausted: {what}. This call was not run. Print what you have "
                f"and finish, or raise the budget (sandbox.budgets / execute(budgets=...)).")

    def before(self, tool: Tool, args: Any) -> str | None:
        """Take what the call costs up front; the refusal message when a budget is used up."""
        limits = self.limits
        with self._lock:
            if "tool_seconds" in limits and self.used["tool_seconds"] >= limits["tool_seconds"]:
                return self._exhausted(
                    "tool_seconds", f"the script's tool calls took {self.used['tool_seconds']:.2f} s"
                )
            counted = []
            if "web_calls" in limits and tool.name.startswith("web_"):
                counted.append("web_calls")
            if "browser_actions" in limits and _drives_browser(tool):
                counted.append("browser_actions")
            for name in counted:
                if self.used[name] + 1 > limits[name]:
                    return self._exhausted(name, f"{self.used[name]:g} {name.replace('_', ' ')} made")
            written = 0
            if "bytes_written" in limits and tool.mutates and isinstance(args, dict):
                written = sum(len(v.encode("utf-8", "surrogatepass")) for k, v in args.items()
                              if k in _WRITTEN_ARGS and isinstance(v, str))
                if self.used["bytes_written"] + written > limits["bytes_written"]:
                    return self._exhausted("bytes_written", f"{self.used['bytes_written']:g} bytes written, this "
                                                            f"call would write {written}")
            for name in counted:
                self.used[name] += 1
            if written:
                self.used["bytes_written"] += written
        return None

    def after(self, seconds: float, reply_bytes: int) -> str | None:
        """Count a finished call; the refusal message when its reply does not fit."""
        with self._lock:
            if "tool_seconds" in self.limits:
                self.used["tool_seconds"] += seconds
            if "reply_bytes" not in self.limits:
                return None
            if self.used["reply_bytes"] + reply_bytes > self.limits["reply_bytes"]:
                return self._exhausted("reply_bytes", f"{self.used['reply_bytes']:g} bytes returned so far, this "
                                                      f"reply has {reply_bytes}; ask for less (limit, offset)")
            self.used["reply_bytes"] += reply_bytes
        return None

    def usage(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: {"limit": limit, "used": round(self.used[name], 3), "refused": name in self.hit}
                    for name, limit in self.limits.items()}

    def exhausted(self) -> list[str]:
        """The budgets that refused a call, in their table's order."""
        with self._lock:
            return [name for name in BUDGETS if name in self.hit]
