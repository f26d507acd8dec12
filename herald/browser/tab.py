"""`Tab`: the page the browser tools act on, and the refs of its latest snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import BrowserSettings
from .guard import RefusalLog

if TYPE_CHECKING:
    from playwright.sync_api import Page


@dataclass
class Tab:
    """The page tools act on and the refs of its latest snapshot (browser thread only)."""

    page: Page
    settings: BrowserSettings
    spill_dir: Path
    generation: int = 0  # bumped by every main-frame navigation
    refs: dict[str, str] = field(default_factory=dict)
    refs_generation: int = -1
    opened: Page | None = None  # a tab the last action opened (a target=_blank link)
    refusals: RefusalLog | None = None  # requests the URL policy refused (None: no policy)

    def watch(self) -> None:
        self.page.on("framenavigated", self._navigated)

    def _navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.generation += 1
