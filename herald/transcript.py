"""Append-only JSONL transcripts: one JSON object per line, safe to write from many threads."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import IO, Any

# One preview for the parent and the backend-mode supervisor, which previews the calls it runs.
from ._sandbox.toolcore.base import PREVIEW_CHARS, preview
from .fastjson import record_line

__all__ = ["PREVIEW_CHARS", "Transcript", "preview"]


class Transcript:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # backslashreplace: a lone surrogate in a record becomes a JSON \u escape, not an error.
        self._file: IO[str] | None = path.open("a", encoding="utf-8", errors="backslashreplace")

    def write(self, record: dict[str, Any]) -> None:
        record.setdefault("ts", round(time.time(), 6))
        line = record_line(record)
        with self._lock:
            if self._file is not None:
                self._file.write(line)

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                file, self._file = self._file, None
                try:
                    file.close()
                except OSError:  # the last records could not be written (disk full): still closed
                    pass


def read_transcript(path: Path) -> list[dict[str, Any]]:
    records = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                records.append(json.loads(line))
    return records
