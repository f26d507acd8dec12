"""A seccomp filter on socket creation: the network half of the Landlock fallback (confine.py).

Landlock (up to ABI 7) restricts TCP bind/connect only: UDP, ICMP, raw, packet and netlink
sockets stay open to a confined process. This filter refuses, with EPERM, creating them:
  * network "none": socket() and socketpair() of every family but AF_UNIX (the script's RPC
    client, the zygote and multiprocessing need AF_UNIX; nothing in a run needs another);
  * network "host": AF_PACKET sockets, and raw or packet sockets of AF_INET / AF_INET6;
  * always: io_uring_setup (io_uring creates sockets without the socket() syscall).
A system call of another ABI (i386 through int 0x80, x32, arm32 compat) kills the process: the
filter only knows the native numbers. The filter is inherited by every child and cannot be
removed. What it cannot do: read the address a unix socket connects to (a pointer), so
pathname unix sockets of the host stay reachable as the file system's permissions allow.

Installed with prctl(PR_SET_SECCOMP), which needs no_new_privs (set first by the caller) and
filters the calling thread only: call it while the process has one thread.
Linux x86_64 and aarch64 only (little-endian). Stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Dict, List, Tuple

__all__ = ["SeccompError", "install_socket_filter", "socket_filter", "supported"]

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# Classic BPF opcodes (linux/filter.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_ALU_AND_K = 0x04 | 0x50 | 0x00  # BPF_ALU | BPF_AND | BPF_K
_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0 = 16  # low 32 bits on little-endian: the kernel reads family and type as int
_OFF_ARG1 = 24

_X32_SYSCALL_BIT = 0x40000000
# machine: (AUDIT_ARCH_*, socket, socketpair); io_uring_setup is 425 on both.
_ARCHES: Dict[str, Tuple[int, int, int]] = {
    "x86_64": (0xC000003E, 41, 53),
    "aarch64": (0xC00000B7, 198, 199),
}
_IO_URING_SETUP = 425

_AF_UNIX = 1
_AF_INET = 2
_AF_INET6 = 10
_AF_PACKET = 17
_SOCK_TYPE_MASK = 0xF
_SOCK_RAW = 3
_SOCK_PACKET = 10


class SeccompError(OSError):
    """The filter could not be installed; the process must not run the script."""


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def supported() -> bool:
    return os.uname().machine in _ARCHES


class _Program:
    """Instructions with jumps to named labels, resolved to BPF's forward offsets at the end."""

    def __init__(self) -> None:
        self.code: List[Tuple[int, object, object, int]] = []
        self.labels: Dict[str, int] = {}

    def op(self, code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> "ctypes.Array[_SockFilter]":
        def offset(here: int, target: object) -> int:
            if isinstance(target, str):
                target = self.labels[target] - here - 1
            assert isinstance(target, int) and 0 <= target < 256
            return target

        out = (_SockFilter * len(self.code))()
        for i, (code, jt, jf, k) in enumerate(self.code):
            out[i] = _SockFilter(code, offset(i, jt), offset(i, jf), k)
        return out


def socket_filter(network: bool) -> "ctypes.Array[_SockFilter]":
    """The filter's instructions for this machine (`network`: the host's network is allowed)."""
    machine = os.uname().machine
    audit_arch, nr_socket, nr_socketpair = _ARCHES[machine]
    refuse = _RET_ERRNO | errno.EPERM
    p = _Program()
    p.op(_LD_W_ABS, _OFF_ARCH)
    p.op(_JEQ_K, audit_arch, 1, 0)
    p.op(_RET_K, _RET_KILL_PROCESS)
    p.op(_LD_W_ABS, _OFF_NR)
    if machine == "x86_64":
        p.op(_JGE_K, _X32_SYSCALL_BIT, "kill", 0)
    p.op(_JEQ_K, nr_socket, "family", 0)
    p.op(_JEQ_K, nr_socketpair, "family", 0)
    p.op(_JEQ_K, _IO_URING_SETUP, "refuse", 0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("family")
    p.op(_LD_W_ABS, _OFF_ARG0)
    if not network:
        p.op(_JEQ_K, _AF_UNIX, "allow", "refuse")
    else:
        p.op(_JEQ_K, _AF_PACKET, "refuse", 0)
        p.op(_JEQ_K, _AF_INET, "type", 0)
        p.op(_JEQ_K, _AF_INET6, "type", "allow")
        p.label("type")
        p.op(_LD_W_ABS, _OFF_ARG1)
        p.op(_ALU_AND_K, _SOCK_TYPE_MASK)
        p.op(_JEQ_K, _SOCK_RAW, "refuse", 0)
        p.op(_JEQ_K, _SOCK_PACKET, "refuse", "allow")
    p.label("allow")
    p.op(_RET_K, _RET_ALLOW)
    p.label("refuse")
    p.op(_RET_K, refuse)
    p.label("kill")
    p.op(_RET_K, _RET_KILL_PROCESS)
    return p.assemble()


def install_socket_filter(network: bool) -> None:
    """Filter this thread's (and its future children's) socket creation; see the module doc.
    Needs no_new_privs. Raises SeccompError on an unsupported machine or a kernel refusal."""
    if not supported():
        raise SeccompError(errno.ENOSYS, "seccomp: no socket filter for %s" % os.uname().machine)
    instructions = socket_filter(network)
    prog = _SockFprog(len(instructions), instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, "seccomp: install the socket filter: %s" % os.strerror(err))
