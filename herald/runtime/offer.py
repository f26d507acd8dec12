"""Which tools a session offers at all, decided once, by `offer_tools`.

A tool that cannot work with the session's settings (`Tool.unavailable_reason`) is left out
unless the session named it in its enabled list, in which case it stays with the reason in its
description. The agent's tool list, execute_code's description, the script stubs and
`herald tools` all read that one answer.

`ToolWarmer` runs the offered tools' `warm` hooks (Chromium's launch for the browser tools, the
web stack's extraction workers), so the first call does not wait for that work: each hook once
per session, on a daemon thread, its errors logged. When (setting `sandbox.warm_tools`):
- "auto" (default): a session with a model (`herald run`, the service: the agent calls
  `model_session_started`) warms every offered tool when it starts, since the model thinks for
  seconds before its first script; a script run on its own (`herald exec`, a Runtime used as a
  library) warms the tools the session's list names, and those its source names as it starts
  (a word of its source: an import or a call; reading the source here only decides what to
  prepare, never what may run).
- "named": only the session's list and the script's words, model or not.
- "offered": every offered tool when any session starts.
- "off": the first call does the work.
A script run on its own does not warm every offered tool because a session offers the browser
whenever Chromium is installed: launching it for every script that never browses would cost
each ~1.3 s of CPU and ~380 MB (measured, headless Chromium).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..tools.context import ToolContext
from ..tools.registry import Registry, Tool

UNAVAILABLE_NOTE = "Unavailable in this session: "
WARM_MODES = ("auto", "named", "offered", "off")
log = logging.getLogger(__name__)


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


class ToolWarmer:
    """One session's warm-ups of its offered tools (see the module docstring)."""

    def __init__(self, ctx: ToolContext, tools: Iterable[Tool], mode: str) -> None:
        if mode not in WARM_MODES:
            raise ValueError(f"unknown sandbox.warm_tools {mode!r}: use one of {', '.join(WARM_MODES)}")
        self._ctx = ctx
        self._mode = mode
        self._hooks: dict[str, Callable[[ToolContext], None]] = {t.name: t.warm for t in tools if t.warm is not None}
        names = sorted(self._hooks, key=len, reverse=True)
        self._named = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b") if names else None
        self._started: set[Callable[[ToolContext], None]] = set()
        self._distinct = len(set(self._hooks.values()))  # tools sharing a hook warm once
        self._lock = threading.Lock()

    def session_started(self, enabled: Iterable[str] | None) -> None:
        """The session begins, offering its tools; `enabled` is its own list of tools, if any."""
        if self._mode == "offered":
            self.warm(self._hooks)
        elif self._mode in ("auto", "named") and enabled is not None:
            self.warm(enabled)

    def model_session_started(self) -> None:
        """A model is offered these tools (the agent's session): in "auto", warm them all now."""
        if self._mode == "auto":
            self.warm(self._hooks)

    def script_starts(self, code: str) -> None:
        """A script is about to run: warm the tools its source names."""
        if self._mode != "off" and self._named is not None and len(self._started) < self._distinct:
            self.warm({m.group(1) for m in self._named.finditer(code)})

    def warm(self, names: Iterable[str]) -> None:
        """Start the warm-up of each named tool that has one and has not started it yet."""
        for name in names:
            hook = self._hooks.get(name)
            if hook is None:
                continue
            with self._lock:
                if hook in self._started:
                    continue
                self._started.add(hook)
            threading.Thread(target=self._run, args=(name, hook), name=f"herald-tool-warm-{name}", daemon=True).start()

    def _run(self, name: str, hook: Callable[[ToolContext], None]) -> None:
        try:
            hook(self._ctx)
        except Exception:  # the tool's first call does the work then, and says what failed
            log.warning("warming up %s failed; its first call will try again", name, exc_info=True)
