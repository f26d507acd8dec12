"""The engine over a pipe, for a workspace on another machine (an SSH host, a container).

Requests are JSON lines on stdin; each is answered by one line on stdout: MARK and the JSON of
handle()'s answer. The first request opens the workspace: {"op": "open", "root", "store_dir",
"max_file_bytes", "max_files", "max_store_bytes"}. Anything else the process prints (a warning
of the interpreter) is not a reply and is skipped by Herald's reader.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, Optional

from .engine import Engine, SnapshotFailure, handle, make_engine

MARK = b"HSNAP "


def _reply(message: Dict[str, Any]) -> None:
    sys.stdout.buffer.write(MARK + json.dumps(message, separators=(",", ":")).encode() + b"\n")
    sys.stdout.buffer.flush()


def _open(request: Dict[str, Any]) -> Engine:
    return make_engine(str(request["root"]), request.get("store_dir") or None, int(request["max_file_bytes"]),
                       int(request["max_files"]), int(request["max_store_bytes"]),
                       [str(path) for path in request.get("skip") or ()])


def main() -> None:
    engine: Optional[Engine] = None
    _reply({"ok": {"ready": True, "pid": os.getpid(), "python": list(sys.version_info[:3])}})
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line.decode())
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
        except ValueError as exc:
            _reply({"error": "bad request: %s" % exc})
            continue
        if request.get("op") == "open":
            try:
                engine = _open(request)
                _reply({"ok": {"store": engine.store.path}})
            except (SnapshotFailure, OSError, KeyError, ValueError) as exc:
                _reply({"error": str(exc)})
            continue
        if engine is None:
            _reply({"error": "no workspace opened"})
            continue
        _reply(handle(engine, request))
