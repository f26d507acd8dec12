"""Landlock: the fallback isolation for a script's process when bubblewrap is unusable.

Policy of `restrict`:
  * PR_SET_NO_NEW_PRIVS is set first (Landlock requires it for an unprivileged caller, and it
    stops setuid binaries from escaping the domain).
  * Every filesystem access right the running ABI knows is handled, so everything not granted
    by a rule is denied: read_only paths get EXECUTE, READ_FILE and READ_DIR beneath them;
    read_write paths get every handled right. Paths that do not exist are skipped.
  * masked paths get nothing, even beneath a granted path (`beneath_except`). A rule grants a
    whole hierarchy, so a granted directory holding a masked path is split: the directories on
    the way to the masked path may only be listed (READ_DIR, which reaches the masked names but
    not their contents), and every other entry of theirs is granted whole, as it is when the
    process confines itself. So in such a directory (the home, when it is the workspace) the
    script uses the entries that were there but cannot add, remove or rename entries at its top
    level: granting that would grant it in the masked directory too (planting ~/.ssh/authorized_keys).
    A rule on a file holds that inode: a file of such a directory replaced later by a rename
    (useradd rewriting /etc/passwd) is refused to a process confined before, until it starts
    again (a fork server lives as long as its Runtimes; a spawned child confines itself anew).
  * network=False (ABI >= 4): TCP bind and connect are handled with no rule, so all are denied.
  * ABI >= 6: the domain is scoped for abstract unix sockets and signals: the script cannot
    connect to an abstract socket or signal a process outside its domain.

Character devices are files like any other to Landlock: a script that writes /dev/null needs
/dev/null in read_write. `default_paths` builds lists that let a Python interpreter run.

What Landlock does NOT do: it does not hide other processes (no pid namespace); it does not
restrict UDP, raw, packet or netlink sockets (confine/seccomp.py does); it does not restrict connect()
on path-based unix sockets up to ABI 7 (the RPC socket keeps working; resolving its path needs
no access right, so its directory need not be listed; a host service's socket stays reachable
as its file permissions allow, which the run's label says); it does not stop reading
/proc/<pid> of other same-uid processes beyond what ptrace access checks already do. It does
restrict ptrace: a process inside a domain cannot ptrace a process outside it. Rights not handled
by the running ABI (e.g. TRUNCATE before ABI 3) stay allowed; that is the kernel's best effort.

Linux x86_64 and aarch64 only (syscalls 444-446 on both); elsewhere abi_version() is 0.
Part of the sandbox package: stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from typing import List, Optional, Sequence, Tuple

__all__ = ["LandlockError", "abi_version", "beneath_except", "default_paths", "restrict"]

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights (UAPI linux/landlock.h).
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_FS_ALL_V1 = (1 << 13) - 1
# Only these rights may be granted on a rule whose path is not a directory (the kernel refuses
# directory rights there with EINVAL).
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_FS_READ_ONLY = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR

_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1


class LandlockError(OSError):
    """A Landlock step failed; the message names the step (and path, for a rule)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the UAPI struct is __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc: Optional[ctypes.CDLL] = None


def _load_libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)  # use_errno: ctypes saves errno per call
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _syscall(number: int, *args: object) -> int:
    """Raw syscall; returns the result or -errno."""
    result = int(_load_libc().syscall(ctypes.c_long(number), *args))
    return -ctypes.get_errno() if result < 0 else result


def _supported_platform() -> bool:
    return sys.platform.startswith("linux") and os.uname().machine in ("x86_64", "aarch64")


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 if unavailable (other OS, ENOSYS, or disabled at boot)."""
    if not _supported_platform():
        return 0
    version = _syscall(
        _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    return version if version > 0 else 0


def _handled_fs(abi: int) -> int:
    # Best effort, as the kernel docs recommend: handle all a given ABI knows, nothing it doesn't
    # (an unknown bit makes create_ruleset fail with EINVAL).
    rights = _FS_ALL_V1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def _fail(step: str, err: int) -> LandlockError:
    return LandlockError(err, f"landlock: {step}: {os.strerror(err)}")


def _add_path_rule(ruleset_fd: int, path: str, rights: int) -> None:
    """Grant `rights` beneath `path` (a real path: beneath_except resolved it; a symbolic link
    found there now is skipped, its target has rules of its own)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # documented: absent paths are skipped
    except OSError as exc:
        raise LandlockError(
            exc.errno or errno.EIO, f"landlock: open {path!r}: {exc.strerror}"
        ) from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode):
            return
        if not stat.S_ISDIR(mode):
            rights &= _FS_FILE_RIGHTS
        attr = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        rc = _syscall(
            _SYS_ADD_RULE,
            ctypes.c_int(ruleset_fd),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
        if rc < 0:
            raise _fail(f"add rule for {path!r}", -rc)
    finally:
        os.close(fd)


def beneath_except(roots: Sequence[str], masked: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(whole, listed): what a rule may grant of `roots` so that nothing in `masked` is reached.

    A Landlock rule grants a directory's whole hierarchy and nothing can be taken back, so a
    root holding a masked path is split: the directories on the way to it are only listed
    (`listed`: READ_DIR), and each of their other entries is granted whole (`whole`), down to
    the masked path, which gets nothing. A root inside a masked path is dropped. Symbolic links
    are skipped: following one needs no right, and its target is governed by its own rules.
    Costs one directory listing per directory on the way to a masked path."""
    whole = []  # type: List[str]
    listed = []  # type: List[str]
    masks = [m.rstrip("/") or "/" for m in masked]
    for root in roots:
        _split(os.path.realpath(root), masks, whole, listed)
    return whole, listed


def _split(path: str, masks: Sequence[str], whole: List[str], listed: List[str]) -> None:
    if any(path == m or path.startswith(m + "/") for m in masks):
        return
    prefix = path.rstrip("/") + "/"
    inner = [m for m in masks if m.startswith(prefix)]
    if not inner:
        whole.append(path)
        return
    listed.append(path)
    try:
        with os.scandir(path) as entries:
            children = [e.path for e in entries if not e.is_symlink()]
    except OSError:
        return  # unlistable here: its entries stay denied (fail closed)
    for child in children:
        _split(child, inner, whole, listed)


def restrict(
    read_only: Sequence[str], read_write: Sequence[str], *, network: bool, masked: Sequence[str] = ()
) -> int:
    """Confine this process (and its future children) irrevocably; returns the ABI used.

    Nothing in `masked` is granted, even beneath a read-only or read-write path (beneath_except).
    Raises LandlockError if Landlock is unavailable or any step fails; the process may then have
    no_new_privs set but is not confined, so the caller must not run the script.
    """
    abi = abi_version()
    if abi == 0:
        raise LandlockError(errno.ENOSYS, "landlock: not available on this system")
    if _load_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)", ctypes.get_errno())
    fs = _handled_fs(abi)
    attr = _RulesetAttr(handled_access_fs=fs)
    size = 8  # older kernels know only handled_access_fs; pass the size the ABI knows
    if abi >= 4:
        size = 16
        if not network:
            attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
    if abi >= 6:
        size = 24
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
    ruleset_fd = _syscall(
        _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset_fd < 0:
        raise _fail("create ruleset", -ruleset_fd)
    try:
        for paths, rights in ((read_only, _FS_READ_ONLY & fs), (read_write, fs)):
            whole, listed = beneath_except(paths, masked)
            for path in whole:
                _add_path_rule(ruleset_fd, path, rights)
            for path in listed:
                _add_path_rule(ruleset_fd, path, _FS_READ_DIR)
        rc = _syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))
        if rc < 0:
            raise _fail("restrict self", -rc)
    finally:
        os.close(ruleset_fd)
    return abi


def default_paths(
    workspace: str,
    extra_ro: Sequence[str] = (),
    extra_rw: Sequence[str] = (),
    *,
    tmp_dir: Optional[str] = None,
) -> Tuple[List[str], List[str]]:
    """(read_only, read_write) lists that let a Python interpreter run the script.

    Read-only: system dirs, the interpreter's prefixes (real paths, so a venv's target counts),
    /proc and /dev (reading /dev/urandom needs only that). Read-write: the workspace, the
    caller's private tmp dir, and /dev/null, /dev/zero (written by many tools). Not /tmp, not
    /dev/shm: those are shared with other processes.
    """
    ro = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev"]
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        real = os.path.realpath(prefix)
        if real not in ro:
            ro.append(real)
    ro.extend(extra_ro)
    rw = [workspace]
    if tmp_dir is not None:
        rw.append(tmp_dir)
    rw.extend(["/dev/null", "/dev/zero"])
    rw.extend(extra_rw)
    return ro, rw
