"""A unified diff between two manifests (a snapshot, or the workspace now), capped in size."""

from __future__ import annotations

import difflib
import os
from typing import Any, Dict, List, Optional

from .scan import DIR_FLAGS, read_regular
from .store import FILE, LINK, Entries, Entry, Store


def _text(entry: Optional[Entry], rel: str, store: Store, root: Optional[str], limit: int) -> Optional[List[str]]:
    """The lines of a file entry (from the store, or from the workspace when `root`); None: binary."""
    if entry is None:
        return []
    if entry[0] == LINK:
        return ["-> %s\n" % entry[4]]
    if entry[0] != FILE:
        return []
    data = store.get_object(entry[4]) if store.has_object(entry[4]) else _read_now(root, rel, limit)
    if data is None or b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace").splitlines(keepends=True)


def _read_now(root: Optional[str], rel: str, limit: int) -> Optional[bytes]:
    if root is None:
        return None
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        head, _, name = rel.rpartition("/")
        for part in head.split("/") if head else []:
            sub = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
        return read_regular(fd, name, None, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def unified(found: Dict[str, Any], then: Entries, now: Entries, store: Store, root: str, max_bytes: int) -> str:
    out: List[str] = []
    size = 0
    for rel in sorted(found["added"] + found["modified"] + found["removed"]):
        old, new = then.get(rel), now.get(rel)
        if (old and old[0] == "d") or (new and new[0] == "d"):
            piece = "directory %s: %s\n" % (rel, "added" if old is None else "removed" if new is None else "changed")
        else:
            before = _text(old, rel, store, None, 0)
            after = _text(new, rel, store, root, 16 << 20)
            if before is None or after is None:
                piece = "Binary files a/%s and b/%s differ\n" % (rel, rel)
            else:
                lines = difflib.unified_diff(before, after, "/dev/null" if old is None else "a/" + rel,
                                             "/dev/null" if new is None else "b/" + rel)
                piece = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                                for line in lines)
                if old and new and old[1] != new[1]:
                    piece = "mode %s: %o -> %o\n" % (rel, old[1], new[1]) + piece
        if size + len(piece) > max_bytes:
            total = len(found["added"]) + len(found["modified"]) + len(found["removed"])
            out.append("... the diff is cut at %d bytes (%d paths changed in all)\n" % (max_bytes, total))
            break
        out.append(piece)
        size += len(piece)
    for rel in found["not_covered"]:
        out.append("not covered (left out by a limit): %s\n" % rel)
    return "".join(out)
