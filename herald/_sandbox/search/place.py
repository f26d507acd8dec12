"""Where a search runs (`Place`: its files, its shell, its session's directory) and the directory
it searches, held while it runs (`Held`, `held_dir`). Stdlib only, Python >= 3.8."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable, ContextManager, Dict, Iterator, NamedTuple, Optional, Protocol

from ..toolcore.callroots import Confinement
from ..toolcore.fileaccess import open_dir
from .ignorefiles import Tree
from .pyengine import Popen


class Ran(Protocol):
    """A shell command's outcome as the place reports it (the Backend protocol's CommandResult)."""

    @property
    def output(self) -> str: ...

    @property
    def exit_code(self) -> int: ...

    @property
    def timed_out(self) -> bool: ...

    @property
    def truncated(self) -> bool:
        """The output passed the capture's cap: what came back is cut."""
        ...

    @property
    def note(self) -> str: ...


class Place(Protocol):
    """Where a search runs: its files, its shell for ripgrep, its session's directory."""

    tree: Tree
    cwd: str
    python_only: bool  # files.search = "python"
    cache: Dict[str, Any]  # lives as long as the place's session: whether ripgrep is there
    cache_lock: threading.Lock
    cancel: Optional[threading.Event]  # set when the run that made the call is over
    popen: Popen  # starts the regex worker

    def run(self, command: str, timeout: float, workdir: Optional[str] = None) -> Ran:
        """Run a bash command line (pipes and all); out of time, kill it with all it started."""
        ...

    def held(self, directory: str) -> ContextManager["Held"]:
        """The directory to search, held for the search. Refused when it is out of the call's reach."""
        ...


Visible = Callable[[str], bool]


class Held(NamedTuple):
    """A directory held for a search."""

    workdir: str  # where ripgrep runs
    visible: Visible  # whether a path relative to it may be shown (not in a mask)
    place: Optional[str]  # the physical path ripgrep's directory must have (None: not checked here)


@contextlib.contextmanager
def held_dir(directory: str, confinement: Optional[Confinement]) -> Iterator[Held]:
    """`directory` opened once and checked (links followed, then where it really is), held
    while the search runs: ripgrep's shell enters its physical path and checks it is still
    there (`Held.place`); the walk checks each thing it opens."""
    fd, place = open_dir(directory, confinement)
    try:
        if confinement is None or not confinement.masked:
            yield Held(place, everything, place)
        else:
            base = place.rstrip("/")
            yield Held(place, lambda rel: not confinement.is_masked(base + "/" + rel, False), place)
    finally:
        os.close(fd)


def everything(relative: str) -> bool:
    return True
