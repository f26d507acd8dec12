"""The backend's cache of its isolation probe's answer, and the unpacking of the sandbox files,
used by the backend setup (backend/sandbox.py). Stdlib only, Python >= 3.8, no imports of the
package: the setup runs this file's text from the archive it has just received (never from the
disk), so what reads the cache is always sent fresh.

Where: `${TMPDIR:-/tmp}/herald-cache-<uid>`, made 0700 and used only when it is a real directory
of this user that nobody else can enter (else nothing is kept). In it, probe.json: the last
positive isolation probe's answer and what it depends on.

The sandbox files are not cached: each session writes its own from the archive (~3 ms). A
shared copy (hard links to one checked version) would let an unconfined script (isolation
"none") rewrite, through the links, what a concurrent session's supervisor imports.

The probe (isolate.probe: does bwrap work here, Landlock's ABI) runs bwrap, ~10-80 ms. Only an
answer that bwrap works is kept, under a key that changes with anything it depends on: the boot,
the user and its credentials and namespace, the sysctls that gate user namespaces, the bwrap
binary found on PATH (its inode, size, times, mode), the probe's own code; and for an hour at
most. A false "works" planted here makes a run fail (bwrap refuses), never run less confined;
"does not work" is never cached, so nothing here can lower the isolation.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
import zlib
from typing import Any, Dict, List, Optional, Set

PREFIX = "herald-cache-"
PROBE_MAX_AGE = 3600.0
PROBE_FILE = "probe.json"
ISOLATE_FILE = "_hermes_runtime/confine/bwrap.py"
# Sysctls that decide whether an unprivileged process may create user namespaces.
USERNS_SYSCTLS = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_unconfined",
)
STATUS_FIELDS = ("Uid:", "Gid:", "Groups:", "CapEff:", "CapBnd:", "NoNewPrivs:", "Seccomp:")


def cache_root() -> Optional[str]:
    """This user's cache directory, made if missing; None when it is not safely ours."""
    root = os.path.join(os.environ.get("TMPDIR") or "/tmp", PREFIX + str(os.getuid()))
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    return root if _private_dir(root) else None


def install(files: Dict[str, str], session_dir: str) -> str:
    """Write the sandbox `files` ({relative path: text}) into the session's own directory."""
    _write_tree(files, session_dir)
    return "unpacked"


def probe_key(files: Dict[str, str]) -> Optional[str]:
    """What a probe's answer depends on (JSON); None when any of it cannot be read (then the
    probe runs) or there is no bwrap (then the probe runs nothing that takes time)."""
    bwrap = shutil.which("bwrap") or ""
    if not bwrap:
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        with open("/proc/self/status") as f:
            status = [line.strip() for line in f if line.startswith(STATUS_FIELDS)]
        found = os.stat(bwrap)
        code = files.get(ISOLATE_FILE, "").encode("utf-8")
        return json.dumps([
            boot, status, os.readlink("/proc/self/ns/user"), [_read_or_dash(p) for p in USERNS_SYSCTLS],
            bwrap, [found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_mode,
                    found.st_uid],
            [len(code), zlib.crc32(code)],  # the probe's code (a name, not a proof: see the module's text)
        ])
    except (OSError, ValueError):
        return None


def known_probe(root: Optional[str], key: Optional[str]) -> Optional[Dict[str, Any]]:
    """The probe's answer kept for `key` within the last PROBE_MAX_AGE: bwrap (found on PATH
    now) works, and Landlock's ABI."""
    if root is None or key is None:
        return None
    try:
        fd = os.open(os.path.join(root, PROBE_FILE), os.O_RDONLY | os.O_NOFOLLOW)
        try:
            found = os.fstat(fd)
            kept = json.loads(os.read(fd, 1 << 16).decode("utf-8"))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    age = time.time() - found.st_mtime
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid() or not 0 <= age < PROBE_MAX_AGE:
        return None
    if not isinstance(kept, dict) or kept.get("key") != key:
        return None
    landlock = kept.get("landlock")
    if not isinstance(landlock, int) or isinstance(landlock, bool):
        return None
    return {"bwrap": shutil.which("bwrap") or "", "bwrap_problem": None, "landlock": landlock}


def remember_probe(root: Optional[str], key: Optional[str], found: Dict[str, Any]) -> None:
    """Keep a probe's answer that bwrap works (one that it does not is probed again every time)."""
    if root is None or key is None or found.get("bwrap_problem") is not None or not found.get("bwrap"):
        return
    try:
        _write_new(root, PROBE_FILE, json.dumps({"key": key, "landlock": int(found.get("landlock") or 0)}).encode())
    except OSError:
        pass


# -- the pieces ----------------------------------------------------------------------------


def _private_dir(path: str) -> bool:
    """A real directory (not a link) of this user that no one else can enter or write."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not found.st_mode & 0o077


def _dirs_of(files: Dict[str, str]) -> List[str]:
    dirs: Set[str] = set()
    for relative in files:
        parts = relative.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(dirs, key=lambda d: d.count("/"))


def _write_tree(files: Dict[str, str], into: str) -> None:
    """The files written into `into` (a new directory: each file is made, never opened)."""
    for directory in _dirs_of(files):
        path = os.path.join(into, *directory.split("/"))
        if not os.path.isdir(path):
            os.mkdir(path, 0o700)
    for relative in sorted(files):
        _write_file(os.path.join(into, *relative.split("/")), files[relative].encode("utf-8"))


def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _write_new(root: str, name: str, data: bytes) -> None:
    """`name` in `root` replaced by a file holding `data`, never seen partly written."""
    temporary = os.path.join(root, ".new-%s-%d" % (name, os.getpid()))
    _write_file(temporary, data)
    os.rename(temporary, os.path.join(root, name))


def _read_or_dash(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "-"
