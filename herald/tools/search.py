"""`search_files` on the session's Backend: the tool's schema, and the place it searches.

The search itself (both engines, globs, ignore files, paging) is the sandbox package's core,
herald/_sandbox/search/core.py, which a backend-mode supervisor runs next to the script too; here it
runs over the session's Backend, ripgrep in the session's shell (`Backend.run`), the regex
worker started from Herald's spawner thread, the call's cancel event from the dispatcher.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from .. import spawner
from .._sandbox.search import core
from .._sandbox.search.core import SEARCH_TIMEOUT
from .._sandbox.search.ignorefiles import Tree
from .._sandbox.search.place import Held, Ran, everything, held_dir
from .._sandbox.toolcore.callroots import call_confinement
from ..backends.base import call_cwd
from ..backends.shell import current_cancel
from .context import ToolContext
from .registry import Tool
from .resources import path_argument


class SearchMatch(TypedDict):
    path: str
    line: int
    text: Annotated[str, "the matching line"]


class SearchResult(TypedDict):
    matches: NotRequired[Annotated[list[SearchMatch], "target='content'"]]
    files: NotRequired[Annotated[list[str], "target='files'"]]
    count: int
    offset: int
    has_more: bool
    next_offset: NotRequired[int]
    hint: NotRequired[str]
    engine: Literal["ripgrep", "python"]


class BackendPlace:
    """A search over the session's Backend (what search/place.py `Place` asks for)."""

    def __init__(self, ctx: ToolContext) -> None:
        self._backend = ctx.backend
        self.tree: Tree = ctx.backend
        self.cwd = call_cwd(ctx.backend)
        self.python_only = ctx.settings.files.search == "python"
        self.cache = ctx.cache
        self.cache_lock: threading.Lock = ctx.cache_lock
        self.cancel = current_cancel()
        self.popen = spawner.popen

    def run(self, command: str, timeout: float, workdir: str | None = None) -> Ran:
        return self._backend.run(command, timeout=timeout, workdir=workdir)

    @contextlib.contextmanager
    def held(self, directory: str) -> Iterator[Held]:
        """On this machine, the directory opened once and checked against the call's
        confinement (held_dir). On a remote backend, where the workspace check allowed the
        path to lead (its pin): ripgrep's shell enters that place and checks it is physically
        there before it starts (Held.place), so a link swapped after the check is refused;
        unpinned (the full profile), the search goes by the path."""
        if self._backend.name != "local":
            place = self._backend.pinned(directory)
            yield Held(place or directory, everything, place)
            return
        with held_dir(directory, call_confinement()) as held:
            yield held


def search_files(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return core.search_files(BackendPlace(ctx), args)


TOOLS = [
    Tool(
        name="search_files",
        description=(
            "Search file contents with a regex (target='content': results give path, line and text) "
            "or find files by name glob (target='files'). Searches `path` recursively, skipping hidden "
            "and generated directories and what .gitignore excludes; paginate with offset."
        ),
        parameters={
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "Regex for content, or a file-name glob such as '*.py' for files.",
                },
                "path": {"type": "string", "default": ".", "description": "Directory (or file) to search."},
                "target": {"type": "string", "enum": ["content", "files"], "default": "content"},
                "file_glob": {
                    "type": ["string", "null"],
                    "description": (
                        "Only files matching this glob: '*.py' matches names at any depth, a glob with '/' "
                        "('src/*.py', 'src/**/*.py') paths below `path`; ** crosses directories, {py,md} alternates."
                    ),
                },
                "limit": {"type": "integer", "minimum": 1, "default": 50},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "timeout": {
                    "type": ["number", "null"],
                    "minimum": 0,
                    "default": SEARCH_TIMEOUT,
                    "description": f"Seconds before the search is stopped (default {SEARCH_TIMEOUT:g}).",
                },
            },
            "required": ["pattern"],
        },
        handler=search_files,
        touches=path_argument(shared=True, default="."),
        returns=SearchResult,
    )
]
