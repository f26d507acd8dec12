"""The backend's cache of sandbox versions and of its isolation probe's answer, used by the
backend setup (backend_sandbox.py). Stdlib only, Python >= 3.8, no imports of the package: the
setup runs this file's text from the archive it has just received (never from the disk it
checks), so what checks the cache is always sent fresh.

Where: `${TMPDIR:-/tmp}/herald-cache-<uid>`, made 0700 and used only when it is a real directory
of this user that nobody else can enter (else there is no cache: every session unpacks, as
without one). In it, one directory per sandbox version, named by the archive's hash, and probe.json: the
last positive isolation probe's answer and what it depends on.

Scripts are hostile: an unconfined one (isolation "none") runs as this user and can write here,
to plant code for the next session's supervisor. So a version is used only when it holds exactly
the archive's files, each compared byte for byte with the archive Herald has just sent, and
nothing else (no __pycache__, no extension module or stray .py that would shadow the sources);
anything else is rebuilt. A version is never partial: it is built under a temporary name and
renamed into place. A session gets hard links to a checked version in its own private directory
(mktemp -d, 0700), where its sockets and scratch files live as before.

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
import stat
import time
import zlib
from typing import Any, Dict, List, Optional, Set

PREFIX = "herald-cache-"
KEEP_VERSIONS = 6  # most recently used versions kept; older ones are removed when one is added
STALE_SECONDS = 600.0  # a temporary directory this old was left by a killed setup
PROBE_MAX_AGE = 3600.0
PROBE_FILE = "probe.json"
ISOLATE_FILE = "_hermes_runtime/isolate.py"
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


def install(files: Dict[str, str], session_dir: str, name: str, root: Optional[str]) -> str:
    """Put the sandbox `files` ({relative path: text}) into `session_dir`: hard links to the
    cached version `name` when it holds exactly these files ("cached"), else written from
    `files` and kept as that version for the next session ("unpacked")."""
    version = os.path.join(root, name) if root is not None and _is_digest(name) else None
    if version is not None and holds(version, files):
        try:
            _link_tree(version, files, session_dir)
            os.utime(version)  # most recently used: removed last
            return "cached"
        except OSError:
            _remove_files(files, session_dir)  # (links only: the cached inodes are never written)
    _write_tree(files, session_dir)
    if version is not None and root is not None:
        try:
            _keep(root, version, files, session_dir)
        except OSError:
            pass  # no cache this time (disk full, a concurrent setup): this session has its files
    return "unpacked"


def holds(version: str, files: Dict[str, str]) -> bool:
    """Whether `version` is a directory of ours holding exactly `files`: the same names, regular
    files with the same bytes, no other entry at any depth."""
    if not _private_dir(version):
        return False
    dirs = {"", *_dirs_of(files)}
    seen = 0
    for directory in sorted(dirs):
        try:
            entries = list(os.scandir(os.path.join(version, *directory.split("/")) if directory else version))
        except OSError:
            return False
        for entry in entries:
            relative = directory + "/" + entry.name if directory else entry.name
            if entry.is_dir(follow_symlinks=False) and relative in dirs:
                continue
            if relative not in files or not entry.is_file(follow_symlinks=False):
                return False
            if not _same_bytes(entry.path, files[relative].encode("utf-8")):
                return False
            seen += 1
    return seen == len(files)


def probe_key(files: Dict[str, str]) -> Optional[str]:
    """What a probe's answer depends on (JSON); None when any of it cannot be read (then the
    probe runs) or there is no bwrap (then the probe runs nothing that takes time)."""
    bwrap = _which("bwrap")
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
    return {"bwrap": _which("bwrap"), "bwrap_problem": None, "landlock": landlock}


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


def _is_digest(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def _same_bytes(path: str, expected: bytes) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid() or found.st_size != len(expected):
            return False
        got = b""
        while len(got) <= len(expected):
            chunk = os.read(fd, len(expected) + 1 - len(got))
            if not chunk:
                break
            got += chunk
        return got == expected
    except OSError:
        return False
    finally:
        os.close(fd)


def _dirs_of(files: Dict[str, str]) -> List[str]:
    dirs: Set[str] = set()
    for relative in files:
        parts = relative.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(dirs, key=lambda d: d.count("/"))


def _write_tree(files: Dict[str, str], into: str) -> None:
    """The files written into `into` (new files only: a name already there is replaced, never
    written through, since it may be a link to a cached file)."""
    for directory in _dirs_of(files):
        path = os.path.join(into, *directory.split("/"))
        if not os.path.isdir(path):
            os.mkdir(path, 0o700)
    for relative in sorted(files):
        path = os.path.join(into, *relative.split("/"))
        if os.path.lexists(path):
            os.unlink(path)
        _write_file(path, files[relative].encode("utf-8"))


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


def _link_tree(source: str, files: Dict[str, str], into: str) -> None:
    for directory in _dirs_of(files):
        path = os.path.join(into, *directory.split("/"))
        if not os.path.isdir(path):
            os.mkdir(path, 0o700)
    for relative in files:
        parts = relative.split("/")
        os.link(os.path.join(source, *parts), os.path.join(into, *parts), follow_symlinks=False)


def _remove_files(files: Dict[str, str], into: str) -> None:
    for relative in files:
        try:
            os.unlink(os.path.join(into, *relative.split("/")))
        except OSError:
            pass


def _keep(root: str, version: str, files: Dict[str, str], session_dir: str) -> None:
    """The session's fresh files kept as `version` (hard links, or copies on another file
    system), built under a temporary name and renamed into place; the oldest versions beyond
    KEEP_VERSIONS, stale temporaries and expired probe answers removed."""
    building = os.path.join(root, ".new-%s-%d" % (os.path.basename(version), os.getpid()))
    _remove(building)
    os.mkdir(building, 0o700)
    try:
        try:
            _link_tree(session_dir, files, building)
        except OSError:
            _remove(building)
            os.mkdir(building, 0o700)
            _write_tree(files, building)
        if os.path.lexists(version):  # it failed the check: moved aside (one rename), then removed
            old = os.path.join(root, ".old-%s-%d" % (os.path.basename(version), os.getpid()))
            os.rename(version, old)
            _remove(old)
        os.rename(building, version)
    finally:
        _remove(building)
    _prune(root, os.path.basename(version))


def _prune(root: str, keep: str) -> None:
    now = time.time()
    versions = []
    for entry in os.scandir(root):
        try:
            found = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.name.startswith((".new-", ".old-")):
            if now - found.st_mtime > STALE_SECONDS:
                _remove(entry.path)
        elif entry.name != keep and _is_digest(entry.name):
            versions.append((found.st_mtime, entry.path))
    for _, path in sorted(versions, reverse=True)[KEEP_VERSIONS - 1:]:
        _remove(path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        import shutil  # here: a session that finds its version cached removes nothing

        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _which(name: str) -> str:
    """`name` found on PATH as shutil.which finds it ("" if not)."""
    for directory in (os.environ.get("PATH") or os.defpath).split(os.pathsep):
        path = os.path.join(directory or ".", name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return ""


def _read_or_dash(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "-"
