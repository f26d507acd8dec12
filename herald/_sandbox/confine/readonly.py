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

import errno
import functools
import shutil
import subprocess
from typing import List, NamedTuple, Optional, Tuple

from . import seccomp

NAMESPACES = (
    "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
    "--die-with-parent", "--new-session", "--cap-drop", "ALL",
)
FILTER_FD = 9  # the seccomp program, read by bwrap
CWD_FD = 3  # where the confined shell says it started, then writes its last directory
STDERR_FD = 8  # the command's stderr, while bwrap's own goes to a file
PROBE_TIMEOUT = 30.0


class Confinement(NamedTuple):
    """How a host confines a command: its bwrap, and the seccomp program for its architecture."""

    bwrap: str
    seccomp: bytes


# The socket filter: `socket()` of a family outside the new network namespace is refused (unix
# sockets are not namespaced: a host's socket file stays reachable), and so are
# io_uring_setup/enter/register (io_uring opens sockets behind the filter's back) and
# add_key/request_key/keyctl (a user's keyrings are the uid's, not the namespace's: root's would
# be the host root's). A call of another ABI (i386 from an x86_64 process, x32) gets ENOSYS.
SOCKET_RULES = seccomp.Rules(
    errno=errno.EACCES, foreign_errno=errno.ENOSYS,
    refused=("io_uring_setup", "io_uring_enter", "io_uring_register", "add_key", "request_key", "keyctl"),
    socket_calls=("socket",),
    families=tuple((family, True) for family in (seccomp.AF_INET, seccomp.AF_INET6, seccomp.AF_NETLINK)),
    other_families=False,
)


def socket_filter(machine: str) -> Optional[bytes]:
    """The seccomp program (struct sock_filter[], little-endian) for `machine` (`uname -m`), or
    None where none is written (parse_probe then finds no confinement)."""
    return seccomp.program(machine, SOCKET_RULES) if seccomp.supported(machine) else None


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
