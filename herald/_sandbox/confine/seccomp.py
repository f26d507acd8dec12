"""Herald's seccomp filters: one classic-BPF assembler, and the Landlock fallback's socket policy.

A filter is a policy (`Rules`) compiled for an architecture by `program`, to the bytes of a
`struct sock_filter[]`: installed here with `install` (the Landlock fallback, confine/inprocess.py), or
handed to bwrap's `--seccomp FD` on any host (the read-only terminal, confine/readonly.py). Every
program has the same shape:
  * a call of another ABI (i386 through int 0x80, x32, arm32 compat) gets `Rules.foreign`
    (the process killed, or an errno): the filter only knows the native numbers;
  * the calls of `Rules.refused` return `Rules.errno`;
  * the socket-creating calls of `Rules.socket_calls` are judged by their family (args[0]) and,
    for some families, their type (args[1]); everything else is allowed.
The filter cannot read what a pointer argument points to (the address a unix socket connects
to): it judges numbers only.

The Landlock fallback's policy (`landlock_rules`): Landlock (up to ABI 7) restricts TCP
bind/connect only, so UDP, ICMP, raw, packet and netlink sockets stay open to a confined
process. Its filter refuses, with EPERM, creating them:
  * network "none": socket() and socketpair() of every family but AF_UNIX (the script's RPC
    client, the zygote and multiprocessing need AF_UNIX; nothing in a run needs another);
  * network "host": AF_PACKET sockets, and raw or packet sockets of AF_INET / AF_INET6;
  * always: io_uring_setup (io_uring creates sockets without the socket() syscall);
and kills the process on a call of another ABI. It is inherited by every child and cannot be
removed. Pathname unix sockets of the host stay reachable as the file system's permissions allow.

`install` uses prctl(PR_SET_SECCOMP), which needs no_new_privs (set first by the caller) and
filters the calling thread only: call it while the process has one thread.
Linux x86_64 and aarch64 only (little-endian). Stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

__all__ = ["Rules", "SeccompError", "install", "install_socket_filter", "landlock_rules", "program",
           "socket_filter", "supported"]

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# Classic BPF opcodes (linux/filter.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_ALU_AND_K = 0x04 | 0x50 | 0x00  # BPF_ALU | BPF_AND | BPF_K
_JA = 0x05 | 0x00  # BPF_JMP | BPF_JA
_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K
_INSTRUCTION = struct.Struct("<HBBI")  # struct sock_filter, little-endian like both architectures

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0 = 16  # low 32 bits on little-endian: the kernel reads family and type as int
_OFF_ARG1 = 24


class _Arch(NamedTuple):
    audit: int  # AUDIT_ARCH_*
    first_foreign: Optional[int]  # numbers from here on are another ABI's (x32's __X32_SYSCALL_BIT)
    calls: Dict[str, int]


_IO_URING = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}
_X86_64 = _Arch(0xC000003E, 0x40000000, dict(
    _IO_URING, socket=41, socketpair=53, add_key=248, request_key=249, keyctl=250))
_AARCH64 = _Arch(0xC00000B7, None, dict(
    _IO_URING, socket=198, socketpair=199, add_key=217, request_key=218, keyctl=219))
# Per `uname -m` (the BSD-style names too: a remote host's answer is passed on as it comes).
_ARCHES: Dict[str, _Arch] = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17
SOCK_RAW, SOCK_PACKET = 3, 10
_SOCK_TYPE_MASK = 0xF  # SOCK_NONBLOCK and SOCK_CLOEXEC live above it

# A family's fate: allowed (True), refused (False), or allowed but for these socket types.
FamilyRule = Union[bool, Tuple[int, ...]]


class Rules(NamedTuple):
    """A policy, independent of the architecture (see the module doc for the program's shape)."""

    errno: int  # what a refused call returns
    foreign_errno: Optional[int]  # what a call of another ABI returns; None: the process is killed
    refused: Tuple[str, ...]  # calls refused outright
    socket_calls: Tuple[str, ...]  # calls whose args[0] is an address family
    families: Tuple[Tuple[int, FamilyRule], ...]  # (family, its fate), checked in this order
    other_families: bool  # whether a family not listed is allowed


class SeccompError(OSError):
    """The filter could not be installed; the process must not run the script."""


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def supported(machine: Optional[str] = None) -> bool:
    """Whether a filter is written for `machine` (`uname -m`; this machine by default)."""
    return (os.uname().machine if machine is None else machine) in _ARCHES


class _Assembler:
    """Instructions with jumps to named labels (None: the next instruction), resolved to BPF's
    forward offsets at the end."""

    def __init__(self) -> None:
        self.code: List[Tuple[int, Optional[str], Optional[str], int]] = []
        self.labels: Dict[str, int] = {}

    def op(self, code: int, k: int, jt: Optional[str] = None, jf: Optional[str] = None) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def match(self, cases: List[Tuple[int, str]], otherwise: str) -> None:
        """Jump to the label of the first case equal to the accumulator, else to `otherwise`."""
        for at, (value, target) in enumerate(cases):
            self.op(_JEQ_K, value, target, otherwise if at == len(cases) - 1 else None)
        if not cases:
            self.op(_JA, 0, otherwise)

    def encode(self) -> bytes:
        def offset(here: int, target: Optional[str]) -> int:
            distance = 0 if target is None else self.labels[target] - here - 1
            assert 0 <= distance < 256, "seccomp: a jump out of BPF's reach"
            return distance

        out = []
        for at, (code, jt, jf, k) in enumerate(self.code):
            if code == _JA:  # an unconditional jump's offset is its k
                out.append(_INSTRUCTION.pack(code, 0, 0, offset(at, jt)))
            else:
                out.append(_INSTRUCTION.pack(code, offset(at, jt), offset(at, jf), k))
        return b"".join(out)


def program(machine: str, rules: Rules) -> bytes:
    """`rules` compiled for `machine` (`uname -m`): a struct sock_filter[], little-endian.
    Raises SeccompError where no filter is written for `machine` (see `supported`)."""
    arch = _ARCHES.get(machine)
    if arch is None:
        raise SeccompError(errno.ENOSYS, "seccomp: no filter for %s (only x86_64 and aarch64)" % machine)
    p = _Assembler()
    p.op(_LD_W_ABS, _OFF_ARCH)
    p.op(_JEQ_K, arch.audit, None, "foreign")
    p.op(_LD_W_ABS, _OFF_NR)
    if arch.first_foreign is not None:
        p.op(_JGE_K, arch.first_foreign, "foreign")
    for name in rules.refused:
        p.op(_JEQ_K, arch.calls[name], "refuse")
    p.match([(arch.calls[name], "family") for name in rules.socket_calls], "allow")
    p.label("family")
    p.op(_LD_W_ABS, _OFF_ARG0)
    # Families that share refused types share the check of args[1].
    typed = sorted({rule for _, rule in rules.families if isinstance(rule, tuple)})

    def fate(rule: FamilyRule) -> str:
        if isinstance(rule, tuple):
            return "types%d" % typed.index(rule)
        return "allow" if rule else "refuse"

    p.match([(family, fate(rule)) for family, rule in rules.families], fate(rules.other_families))
    for index, types in enumerate(typed):
        p.label("types%d" % index)
        p.op(_LD_W_ABS, _OFF_ARG1)
        p.op(_ALU_AND_K, _SOCK_TYPE_MASK)
        p.match([(kind, "refuse") for kind in types], "allow")
    p.label("allow")
    p.op(_RET_K, _RET_ALLOW)
    p.label("refuse")
    p.op(_RET_K, _RET_ERRNO | rules.errno)
    p.label("foreign")
    p.op(_RET_K, _RET_KILL_PROCESS if rules.foreign_errno is None else _RET_ERRNO | rules.foreign_errno)
    return p.encode()


def install(filter_program: bytes) -> None:
    """Filter this thread (and its future children) with `filter_program` (from `program`).
    Needs no_new_privs. Raises SeccompError on a kernel refusal."""
    count = len(filter_program) // _INSTRUCTION.size
    instructions = (_SockFilter * count).from_buffer_copy(filter_program)
    prog = _SockFprog(count, instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, "seccomp: install the socket filter: %s" % os.strerror(err))


def landlock_rules(network: bool) -> Rules:
    """The Landlock fallback's policy (`network`: the host's network is allowed); module doc."""
    if network:
        families: Tuple[Tuple[int, FamilyRule], ...] = (
            (AF_PACKET, False), (AF_INET, (SOCK_RAW, SOCK_PACKET)), (AF_INET6, (SOCK_RAW, SOCK_PACKET)))
    else:
        families = ((AF_UNIX, True),)
    return Rules(errno=errno.EPERM, foreign_errno=None, refused=("io_uring_setup",),
                 socket_calls=("socket", "socketpair"), families=families, other_families=network)


def socket_filter(network: bool) -> bytes:
    """The Landlock fallback's program for this machine."""
    return program(os.uname().machine, landlock_rules(network))


def install_socket_filter(network: bool) -> None:
    """Filter this thread's (and its future children's) socket creation; see the module doc.
    Needs no_new_privs. Raises SeccompError on an unsupported machine or a kernel refusal."""
    if not supported():
        raise SeccompError(errno.ENOSYS, "seccomp: no socket filter for %s" % os.uname().machine)
    install(socket_filter(network))
