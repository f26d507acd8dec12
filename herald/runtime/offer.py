"""Which tools a session offers at all, decided once, by `offer_tools`.

A tool that cannot work with the session's settings (`Tool.unavailable_reason`) is left out
unless the session named it in its enabled list, in which case it stays with the reason in its
description. The agent's tool list, execute_code's description, the script stubs and
`herald tools` all read that one answer.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..tools.registry import Registry, Tool, ToolContext

log = logging.getLogger(__name__)

UNAVAILABLE_NOTE = "Unavailable in this session: "


@dataclass(frozen=True)
class ToolOffer:
    """What a session offers: the tools (unavailable ones that were named explicitly carry the
    reason in their description) and the tools withheld, each with the reason."""

    tools: list[Tool]
    withheld: dict[str, str]

    @property
    def script_tools(self) -> list[Tool]:
        return [t for t in self.tools if t.sandbox]

    def elsewhere(self, registry: Registry) -> dict[str, str]:
        """Tools of `registry` a script cannot call, and why (for its import errors)."""
        here = {t.name for t in self.script_tools}
        return {
            t.name: "can only be called directly by the model, not from a script" if not t.sandbox
            else f"is not available in this session: {self.withheld[t.name]}" if t.name in self.withheld
            else "is not enabled in this session"
            for t in registry if t.name not in here
        }


def offer_tools(registry: Registry, enabled: list[str] | None, settings: Settings) -> ToolOffer:
    """The one decision on which tools a session offers (see the module docstring).

    `enabled` None means "every tool", so a tool that cannot work is quietly left out; a list
    is the session's explicit choice, so its tools stay, marked, and a call says why it fails.
    Unknown names in `enabled` raise ValueError, as `Registry.select` does."""
    offered: list[Tool] = []
    withheld: dict[str, str] = {}
    reasons: dict[Any, str | None] = {}  # one check per function: the browser tools share theirs
    for tool in registry.select(enabled):
        if tool.unavailable not in reasons:
            reasons[tool.unavailable] = tool.unavailable_reason(settings)
        reason = reasons[tool.unavailable]
        if reason is None:
            offered.append(tool)
        elif enabled is None:
            withheld[tool.name] = reason
        else:
            offered.append(_marked_unavailable(tool, reason))
    return ToolOffer(offered, withheld)


def _marked_unavailable(tool: Tool, reason: str) -> Tool:
    # The note ends the first line: every surface that shows only a tool's summary line (the
    # execute_code description, `herald tools`) shows it too.
    first, sep, rest = tool.description.strip().partition("\n")
    note = f"{UNAVAILABLE_NOTE}{reason.strip().rstrip('.')}."
    return dataclasses.replace(tool, description=f"{first.rstrip()} {note}{sep}{rest}")


def warm_offered(tools: list[Tool], ctx: ToolContext) -> None:
    """Run each offered tool's `warm` once for the session `ctx` is, each on a daemon thread of its
    own (a slow one holds up no other), so a first call finds its imports done. A failure is
    logged: the tool's first call meets it again and says what to do."""
    hooks = list(dict.fromkeys(tool.warm for tool in tools if tool.warm is not None))
    with ctx.cache_lock:
        warmed: set[Any] = ctx.cache.setdefault("runtime.warmed", set())
        hooks = [hook for hook in hooks if hook not in warmed]
        warmed.update(hooks)
    for hook in hooks:
        threading.Thread(target=_warm, args=(hook, ctx), name="herald-warm", daemon=True).start()


def _warm(hook: Any, ctx: ToolContext) -> None:
    try:
        hook(ctx)
    except Exception:
        log.warning("warming up %s failed", getattr(hook, "__qualname__", hook), exc_info=True)
