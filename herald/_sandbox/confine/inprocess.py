"""Confinement a sandbox process applies to itself, first thing (stdlib, Python >= 3.8).

With `sandbox.isolation = "landlock"` (or "auto" where bwrap cannot run) Herald cannot wrap the
interpreter in namespaces, so the interpreter restricts itself before it imports or runs
anything else: a spawned child in `bootstrap.main`, the fork server in `zygote.main` (its forks
inherit all of it). Herald passes the rules in the environment; a step that fails stops the
process, so a run never goes ahead less confined than its result says. In order:
  1. every capability dropped: the bounding set (when we may: CAP_SETPCAP, i.e. root), the
     ambient set, then effective, permitted and inheritable; root keeps only its uid, so it
     still owns root-owned files (the masked paths below are why);
  2. no_new_privs and the Landlock domain (confine/landlock.py): the file view, minus the masked paths;
     TCP refused, abstract unix sockets and signals scoped, as the kernel's ABI allows;
  3. the seccomp socket filter (confine/seccomp.py): without the host network, no socket but AF_UNIX.
All three apply to the calling thread and its future children only: the process must still
have one thread (it is checked).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
from typing import Any, Dict

ENV = "HERALD_LANDLOCK"

_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_SETPCAP = 8
_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


class ConfineError(OSError):
    """A confinement step failed; the process must not run the script."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def confine_from_environ() -> None:
    spec = os.environ.pop(ENV, None)
    if not spec:
        return
    confine(json.loads(spec))


def confine(rules: Dict[str, Any]) -> None:
    """Apply `rules` (isolate.landlock_rules) to this process; see the module doc."""
    from .landlock import restrict
    from .seccomp import install_socket_filter

    _check_single_thread()
    drop_capabilities()
    network = bool(rules["network"])
    restrict(rules["read_only"], rules["read_write"], network=network, masked=rules.get("masked", ()))
    install_socket_filter(network)


def drop_capabilities() -> None:
    """Drop every capability of this process for good (see the module doc)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if _effective_caps() >> _CAP_SETPCAP & 1:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
        for cap in range(last + 1):
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
                _fail("prctl(PR_CAPBSET_DROP, %d)" % cap)
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
        _fail("prctl(PR_CAP_AMBIENT_CLEAR_ALL)")  # EINVAL: a kernel before ambient capabilities (4.3)
    number = _SYS_CAPSET.get(os.uname().machine)
    if number is None:
        raise ConfineError(errno.ENOSYS, "confine: no capset for %s" % os.uname().machine)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: nothing effective, permitted or inheritable
    if libc.syscall(ctypes.c_long(number), ctypes.byref(header), ctypes.byref(data)) != 0:
        _fail("capset")
    if _effective_caps() or _status_field("CapPrm") or _status_field("CapAmb"):
        raise ConfineError(errno.EPERM, "confine: capabilities remain after dropping them")


def _effective_caps() -> int:
    return _status_field("CapEff")


def _status_field(name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1], 16)
    raise ConfineError(errno.ENOENT, "confine: no %s in /proc/self/status" % name)


def _check_single_thread() -> None:
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:
        raise ConfineError(errno.EBUSY, "confine: %d threads; confinement covers the calling thread only"
                           % len(threads))


def _fail(step: str) -> None:
    err = ctypes.get_errno()
    raise ConfineError(err, "confine: %s: %s" % (step, os.strerror(err)))
