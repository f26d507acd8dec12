"""The fork server's copy of each sandbox directory's `hermes_tools`. Stdlib only, Python >= 3.8.

Why: a forked child that imports the stubs itself writes to some 300 pages it shares with the
zygote, and on a virtual machine each such copy-on-write fault costs microseconds: about 1.5 ms
per child, on the way to every warm child's "ready". Imported once here, before the fork, the
module is already in every child (each has its own copy of its memory, as of the stdlib's).

The stubs are Herald's generated code (tools/stubgen.py), written before the Runtime's
first child is asked for, in a directory an isolated script sees read-only. A file that has
changed since it was loaded here is never loaded again: the child imports it itself, as it
would without this cache.
"""

from __future__ import annotations

import importlib.util
import os
from collections import OrderedDict
from types import ModuleType
from typing import Optional, Tuple

MODULE = "hermes_tools"
MAX_DIRECTORIES = 16  # Runtimes alive at once that share a zygote, beyond which the oldest is reloaded

_Stamp = Tuple[int, int, int]


class StubCache:
    def __init__(self, limit: int = MAX_DIRECTORIES) -> None:
        self.limit = limit
        self._loaded: "OrderedDict[str, Tuple[_Stamp, Optional[ModuleType]]]" = OrderedDict()

    def get(self, sandbox_dir: str) -> Optional[ModuleType]:
        """The stubs of `sandbox_dir`, imported here; None when the child should import them
        itself (no file, it fails to import, or it changed since it was loaded)."""
        path = os.path.join(sandbox_dir, MODULE + ".py")
        try:
            info = os.stat(path)
        except OSError:
            return None
        stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        known = self._loaded.get(sandbox_dir)
        if known is not None:
            self._loaded.move_to_end(sandbox_dir)
            return known[1] if known[0] == stamp else None
        module = _load(path)
        self._loaded[sandbox_dir] = (stamp, module)
        while len(self._loaded) > self.limit:
            _, (_, evicted) = self._loaded.popitem(last=False)
            if evicted is not None:
                # The zygote freezes its objects out of the collector's reach before each fork
                # (child/zygote.py), so a module and its functions, which refer to each other, would
                # never be freed: break that cycle here, and reference counting frees them.
                evicted.__dict__.clear()
        return module


def _load(path: str) -> Optional[ModuleType]:
    try:
        spec = importlib.util.spec_from_file_location(MODULE, path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:  # the child's own import then reports what is wrong, where it can be seen
        return None
    return module
