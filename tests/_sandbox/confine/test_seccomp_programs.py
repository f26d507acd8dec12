"""Herald's two seccomp programs, decoded and run: what each answers for every call that matters.

The programs are bytes a kernel runs (installed in-process for the Landlock fallback, handed to
bwrap for the read-only terminal, possibly for another host's architecture), so they are checked
here the way the kernel reads them: a classic-BPF interpreter over struct seccomp_data, on both
architectures, for every address family and socket type (with SOCK_NONBLOCK / SOCK_CLOEXEC set
too), the refused calls, the socket calls' neighbours, x32 numbers and a foreign audit arch. The
expectations are written from the policies' documentation, not from the code that builds them.
The processes that run under these filters are tested in test_landlock*.py and
tests/policy/test_readonly_*.py.
"""

from __future__ import annotations

import errno
import struct

import pytest

from herald._sandbox.confine import readonly, seccomp

ALLOW, KILL = 0x7FFF0000, 0x80000000
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000
ARCHES = {  # machine: (AUDIT_ARCH_*, the numbers of the calls the policies name)
    "x86_64": (0xC000003E, {"socket": 41, "socketpair": 53, "io_uring_setup": 425, "io_uring_enter": 426,
                            "io_uring_register": 427, "add_key": 248, "request_key": 249, "keyctl": 250}),
    "aarch64": (0xC00000B7, {"socket": 198, "socketpair": 199, "io_uring_setup": 425, "io_uring_enter": 426,
                             "io_uring_register": 427, "add_key": 217, "request_key": 218, "keyctl": 219}),
}
NEUTRAL = (0, 1, 2, 3, 42, 56, 57, 59, 200, 231, 435)  # read, write, open, connect, clone, execve, ...
FAMILIES = range(0, 46)
TYPES = range(0, 12)
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17
SOCK_RAW, SOCK_PACKET = 3, 10


def run(program: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """The kernel's reading of `program` for one call (the instructions Herald emits)."""
    data = struct.pack("<IIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    code: list[tuple[int, int, int, int]] = [
        struct.unpack_from("<HBBI", program, at) for at in range(0, len(program), 8)
    ]
    assert len(program) % 8 == 0 and 0 < len(code) <= 4096
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == 0x54:  # and #k
            acc &= k
        elif op == 0x05:  # ja
            pc += k
        elif op in (0x15, 0x35):  # jeq, jge
            pc += jt if (acc == k if op == 0x15 else acc >= k) else jf
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")


def landlock_expected(network: bool, family: int, kind: int) -> int:
    if not network:
        refused = family != AF_UNIX
    else:
        refused = family == AF_PACKET or (family in (AF_INET, AF_INET6) and kind in (SOCK_RAW, SOCK_PACKET))
    return 0x50000 | errno.EPERM if refused else ALLOW


@pytest.mark.parametrize("machine", sorted(ARCHES))
@pytest.mark.parametrize("network", [False, True])
def test_landlock_fallback_filter(machine: str, network: bool) -> None:
    audit, nrs = ARCHES[machine]
    program = seccomp.program(machine, seccomp.landlock_rules(network))
    for call in ("socket", "socketpair"):
        for family in FAMILIES:
            for kind in TYPES:
                for flags in (0, SOCK_NONBLOCK | SOCK_CLOEXEC):
                    said = run(program, audit, nrs[call], (family, kind | flags, 0))
                    assert said == landlock_expected(network, family, kind), (call, family, kind, flags)
    assert run(program, audit, nrs["io_uring_setup"], (8, 0)) == 0x50000 | errno.EPERM
    for call in ("io_uring_enter", "io_uring_register", "add_key", "request_key", "keyctl"):
        assert run(program, audit, nrs[call]) == ALLOW, call  # not this policy's business
    for nr in NEUTRAL:
        assert run(program, audit, nr, (AF_PACKET, SOCK_RAW)) == ALLOW, nr
    assert run(program, 0x40000003, 102, (1, 0)) == KILL  # i386's socketcall through int 0x80
    assert run(program, 0x40000028, 281) == KILL  # arm32 compat
    if machine == "x86_64":
        for nr in (0x40000000, 0x40000000 | 41, 0xFFFFFFFF):
            assert run(program, audit, nr, (AF_UNIX, 1)) == KILL, hex(nr)


@pytest.mark.parametrize("machine", sorted(ARCHES))
def test_readonly_terminal_filter(machine: str) -> None:
    audit, nrs = ARCHES[machine]
    program = readonly.socket_filter(machine)
    assert program is not None
    assert program == readonly.socket_filter({"x86_64": "amd64", "aarch64": "arm64"}[machine])
    for family in FAMILIES:
        for kind in TYPES:
            said = run(program, audit, nrs["socket"], (family, kind | SOCK_CLOEXEC, 0))
            # Only the families that live in the new network namespace: no unix socket of the host.
            allowed = family in (AF_INET, AF_INET6, AF_NETLINK)
            assert said == (ALLOW if allowed else 0x50000 | errno.EACCES), (family, kind)
        assert run(program, audit, nrs["socketpair"], (family, 1)) == ALLOW  # a pair reaches nothing
    for call in ("io_uring_setup", "io_uring_enter", "io_uring_register", "add_key", "request_key", "keyctl"):
        assert run(program, audit, nrs[call]) == 0x50000 | errno.EACCES, call
    for nr in NEUTRAL:
        assert run(program, audit, nr, (AF_UNIX, 1)) == ALLOW, nr
    assert run(program, 0x40000003, 102, (1, 0)) == 0x50000 | errno.ENOSYS
    if machine == "x86_64":
        for nr in (0x40000000, 0x40000000 | 41, 0xFFFFFFFF):
            assert run(program, audit, nr, (AF_UNIX, 1)) == 0x50000 | errno.ENOSYS, hex(nr)


def test_a_machine_without_a_filter() -> None:
    assert readonly.socket_filter("riscv64") is None and readonly.socket_filter("") is None
    assert not seccomp.supported("riscv64") and not seccomp.supported("")
    with pytest.raises(seccomp.SeccompError, match="no filter for riscv64"):
        seccomp.program("riscv64", seccomp.landlock_rules(False))
