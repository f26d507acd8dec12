"""The read-only profile's `terminal`: a command confined by the OS, not by a parser.

Stdlib only, Python >= 3.8 (the sandbox package): Herald builds the text here and runs it on
whatever machine holds the session's shell (this one, an SSH host).

A confined command runs in a fresh `bash` under bubblewrap with every path read-only: the whole
tree bound read-only (`--ro-bind / /`, every mount below it too), its own /proc (with /proc/sys
read-only: a sysctl checks the writer's uid, and root in the namespace is uid 0 outside) and
/dev (a private tmpfs: nothing written there outlives the command), new user, PID, IPC, UTS and
network namespaces (so no TCP/UDP reaches anything, loopback included), no capabilities (as
root too: root in a user namespace cannot remount what bwrap locked read-only, and a read-only
mount refuses a write whatever the uid), `--new-session` (no TIOCSTI into a terminal), and
killed with its parent (its background jobs end with it: the PID namespace goes). Unix sockets
are not namespaced by a network namespace: a socket file (a docker daemon's, an ssh-agent's)
could still be connected to, so a seccomp filter refuses `socket()` for every family but the
network-namespaced ones, io_uring (which could open one behind the filter's back) and the
keyring calls (keyrings are the uid's), on the architectures it is written for (x86_64, aarch64).

The session's state: the confined shell starts in the session shell's directory with its
exported variables (bwrap passes the environment on) and, after the command, writes its
directory to a descriptor the session shell opened on a file of its own; the session shell
`cd`s there if it is a directory. Nothing else comes back: exports made inside stay inside.
"""

from __future__ import annotations

import functools
import shutil
import struct
import subprocess
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

NAMESPACES = (
    "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
    "--die-with-parent", "--new-session", "--cap-drop", "ALL",
)
FILTER_FD = 9  # the seccomp program, read by bwrap
CWD_FD = 3  # where the confined shell writes its last directory
PROBE_TIMEOUT = 30.0



class Confinement(NamedTuple):
    """How a host confines a command: its bwrap, and the seccomp program for its architecture."""

    bwrap: str
    seccomp: bytes


# seccomp, per `uname -m`: (audit arch, socket, the calls refused outright, first x32 number).
# Refused: io_uring_setup/enter/register (io_uring opens sockets behind the filter's back) and
# add_key/request_key/keyctl (a user's keyrings are the uid's, not the namespace's: root's
# would be the host root's).
_ARCHES: Dict[str, Tuple[int, int, Tuple[int, ...], Optional[int]]] = {
    "x86_64": (0xC000003E, 41, (425, 426, 427, 248, 249, 250), 0x40000000),
    "aarch64": (0xC00000B7, 198, (425, 426, 427, 217, 218, 219), None),
}
_ARCHES["amd64"], _ARCHES["arm64"] = _ARCHES["x86_64"], _ARCHES["aarch64"]
_NAMESPACED_FAMILIES = (2, 10, 16)  # AF_INET, AF_INET6, AF_NETLINK: inside the new network namespace
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EACCES, _ENOSYS = 13, 38


def socket_filter(machine: str) -> Optional[bytes]:
    """The seccomp program (struct sock_filter[], little-endian) for `machine` (`uname -m`), or
    None where none is written (parse_probe then finds no confinement)."""
    arch = _ARCHES.get(machine)
    if arch is None:
        return None
    audit, sock, refused, x32 = arch
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to relative jumps.
    prog: List[Tuple[Any, ...]] = [("ld", 4), ("jeq", audit, None, "foreign"), ("ld", 0)]
    if x32 is not None:
        prog.append(("jge", x32, "foreign", None))
    prog += [("jeq", nr, "refuse", None) for nr in refused]
    prog += [("jeq", sock, None, "allow"), ("ld", 16)]  # args[0], the low word: the family
    prog += [("jeq", family, "allow", None) for family in _NAMESPACED_FAMILIES]
    # Any other family falls through to "refuse"; a foreign architecture (i386 calls from an
    # x86_64 process, x32) gets nothing at all.
    prog += [("ret", _ERRNO | _EACCES, "refuse"), ("ret", _ALLOW, "allow"), ("ret", _ERRNO | _ENOSYS, "foreign")]
    labels = {ins[2]: at for at, ins in enumerate(prog) if ins[0] == "ret"}
    out = b""
    for at, ins in enumerate(prog):
        if ins[0] == "ld":
            out += struct.pack("<HBBI", _LD_ABS, 0, 0, ins[1])
        elif ins[0] == "ret":
            out += struct.pack("<HBBI", _RET, 0, 0, ins[1])
        else:
            jt = labels[ins[2]] - at - 1 if ins[2] else 0
            jf = labels[ins[3]] - at - 1 if ins[3] else 0
            out += struct.pack("<HBBI", _JEQ if ins[0] == "jeq" else _JGE, jt, jf, ins[1])
    return out


def bwrap_argv(bwrap: str, private_dir: str, with_filter: bool) -> List[str]:
    """bwrap's options up to (not including) `--chdir`: `private_dir` (the session shell's own
    directory, where the command's file is) is bound read-only over the private /dev."""
    # /proc/sys read-only too: a sysctl checks the writer's uid, not its namespace, so root in
    # the namespace (uid 0 outside) could set the host's.
    argv = [bwrap, *NAMESPACES, "--ro-bind", "/", "/", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",
            "--dev", "/dev", "--ro-bind", private_dir, private_dir]
    if with_filter:
        argv += ["--seccomp", str(FILTER_FD)]
    return argv


def shell_words(words: List[str]) -> str:
    return " ".join("'" + w.replace("'", "'\"'\"'") + "'" for w in words)


def octal(data: bytes) -> str:
    """`data` as a printf format of octal escapes (no other character is special there)."""
    return "".join("\\%03o" % b for b in data)


def probe_script() -> str:
    """A POSIX sh script that prints `<bwrap path>\\n<machine>\\n` and exits 0 when a confined
    command runs on its host, else prints why and exits non-zero."""
    argv = shell_words(bwrap_argv("$bwrap", "/tmp", False)).replace("'$bwrap'", '"$bwrap"')
    return (
        'bwrap=$(command -v bwrap) || { echo "bwrap is not installed (Debian: apt-get install bubblewrap)"; exit 3; }\n'
        "said=$(%s -- /bin/sh -c 'test -w / && echo / is writable && exit 1; exit 0' 2>&1) "
        '|| { echo "bwrap cannot confine a command here: ${said:-it refused}"; exit 4; }\n'
        'printf "%%s\\n%%s\\n" "$bwrap" "$(uname -m)"\n' % argv
    )


def parse_probe(status: int, output: str) -> Tuple[Optional[Confinement], str]:
    """(the confinement, "") from a probe that worked, else (None, why not)."""
    lines = output.strip().splitlines()
    if status == 0 and len(lines) >= 2 and lines[-2].startswith("/"):
        seccomp = socket_filter(lines[-1])
        if seccomp is None:  # unix sockets would stay reachable: no confinement worth the name
            return None, "Herald has no seccomp socket filter for %s (only x86_64 and aarch64)" % lines[-1]
        return Confinement(lines[-2], seccomp), ""
    return None, " ".join(lines)[:300] or "the probe failed (exit %d)" % status


@functools.lru_cache(maxsize=1)
def local_confinement() -> Tuple[Optional[Confinement], str]:
    """The probe on this machine, once per process."""
    if not shutil.which("bwrap") or not shutil.which("sh"):
        return None, "bwrap is not installed (Debian: apt-get install bubblewrap)"
    try:
        done = subprocess.run(["sh", "-c", probe_script()], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "bwrap did not run: %s" % exc
    return parse_probe(done.returncode, done.stdout.decode("utf-8", "replace"))
