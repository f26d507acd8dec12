"""How a script's interpreter is confined, built on the machine where it runs. Stdlib only,
Python >= 3.8: host mode (runtime/sandbox/isolation.py) and in-backend execution (the backend's
supervisor and zygote) build the same view with the same code.

bwrap: new user, PID, IPC, UTS and network namespaces (the network only with network "none"),
its own /proc and /dev, the system directories read-only, a private /tmp as HOME, then the
read-only and read-write binds (parents before children), then the masked paths as empty
tmpfs. As root the script is root in its namespace without capabilities: it owns root-owned
files, so the well-known secret stores under /etc are masked.

Landlock (where bwrap cannot run): the rules the process applies to itself (confine/inprocess.py) and a
private scratch directory for HOME and TMPDIR. The same paths are masked (Landlock cannot hide
them; it refuses them: landlock.beneath_except), /dev is cut to the devices bwrap's /dev has,
every capability is dropped (so root keeps only its uid), and a seccomp filter refuses every
socket but AF_UNIX without the host network. Not covered: pathname unix sockets of the host
(the label says so), other processes (visible, not signalled from ABI 6).

In-backend, Herald sends a spec (what it knows: the workspace, the binds and masks it was asked
for, the network, the bwrap the probe found) and `complete` adds what only the backend knows:
its sandbox directory and interpreter, real paths, and the user's credential stores where a
bind would show them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence

SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Secret stores a root-in-namespace script could read (it owns root-owned files): masked.
MASKED_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers")
MASKED_DIRS = ("/etc/ssh", "/etc/sudoers.d", "/etc/ssl/private", "/etc/herald")
# A user's credential stores, hidden when a bind (a workspace that is the home) holds them.
HOME_SECRETS = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".config/herald",
                ".local/share/herald", ".netrc", ".git-credentials", ".pgpass")
LANDLOCK_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")
LANDLOCK_READ_DEVICES = ("/dev/random", "/dev/urandom")
PROBE_TIMEOUT = 30.0


def bwrap_args(bwrap: str, read_only: Sequence[str], read_write: Sequence[str], masked: Sequence[str],
               network: str) -> List[str]:
    """bwrap's command line up to (not including) the "--" before the confined argv."""
    args = [
        bwrap,
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--cap-drop", "ALL",  # as root, bwrap would keep them: root in the namespace owns root's files
    ]
    if network != "host":
        args.append("--unshare-net")
    for path in SYSTEM_DIRS:
        if os.path.islink(path):  # merged /usr: /lib -> usr/lib
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in MASKED_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in MASKED_DIRS:
        if os.path.isdir(path):
            args += ["--tmpfs", path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--setenv", "HOME", "/tmp"]
    # Parents before children, so that a bind inside another one lands on top of it.
    binds = [(p, "--ro-bind") for p in read_only] + [(p, "--bind") for p in read_write]
    for path, how in sorted(binds, key=lambda item: item[0].count("/")):
        if os.path.exists(path):
            args += [how, path, path]
    for path in masked:
        if os.path.isdir(path):
            args += ["--tmpfs", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args


def bwrap_problem(bwrap: Optional[str]) -> Optional[str]:
    """Why bubblewrap at `bwrap` cannot isolate a process here (None: it can)."""
    if not bwrap:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    probe = [*bwrap_args(bwrap, (), (), (), "none"), "--", "/bin/true"]
    try:
        done = subprocess.run(probe, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "bwrap did not run: %s" % (exc,)
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[:200]
        return "bwrap cannot create namespaces here: %s" % (said or done.returncode)
    return None


def probe() -> Dict[str, Any]:
    """What can confine a script on this machine: bwrap's path and why it cannot run (if so),
    and the Landlock ABI (0: none). Herald asks once per backend connection."""
    from .landlock import abi_version

    bwrap = shutil.which("bwrap") or ""
    return {"bwrap": bwrap, "bwrap_problem": bwrap_problem(bwrap), "landlock": abi_version()}


def interpreter_dirs(python: str) -> List[str]:
    """Directories the interpreter `python` needs read-only: its installation (outside /usr)
    and, for a venv, the venv and its base installation (known when it is this interpreter)."""
    found = []  # type: List[str]
    candidates = [python, os.path.realpath(python)]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        found += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    for path in candidates:
        found.append(os.path.dirname(os.path.dirname(os.path.abspath(path))))  # <prefix>/bin/python
    real = [os.path.realpath(p) for p in dict.fromkeys(found) if p != "/"]
    return [p for p in dict.fromkeys(real) if not inside_any(p, ("/usr",)) and p != "/"]


def landlock_rules(read_only: Sequence[str], read_write: Sequence[str], network: str, scratch: str,
                   masked: Sequence[str] = ()) -> Dict[str, Any]:
    """Landlock rules for confine/inprocess.py: the same file view as bwrap's, `scratch` for HOME/TMPDIR.
    The same secrets are masked (MASKED_FILES, MASKED_DIRS and `masked`); of /dev only the
    devices a program expects (bwrap's own /dev: not the disks, which root would own)."""
    system = [p for p in (*SYSTEM_DIRS, "/proc", *LANDLOCK_READ_DEVICES) if os.path.exists(p)]
    devices = [p for p in LANDLOCK_DEVICES if os.path.exists(p)]
    return {
        "read_only": system + list(read_only),
        "read_write": [*read_write, scratch, *devices],
        "masked": [*MASKED_FILES, *MASKED_DIRS, *masked],
        "network": network == "host",
    }


def complete(spec: Dict[str, Any], sandbox_dir: str) -> Dict[str, Any]:
    """Herald's spec made concrete on this machine for a script run from `sandbox_dir` by this
    interpreter: real paths, the sandbox files and interpreter read-only, credential stores of
    the home masked where a bind would show them."""
    read_write = _reals(spec.get("read_write", ()))
    read_only = _reals([sandbox_dir, *interpreter_dirs(sys.executable), *spec.get("read_only", ())])
    read_only = [p for p in read_only if p not in read_write]
    home = os.path.realpath(os.path.expanduser("~"))
    secrets = [os.path.join(home, name) for name in HOME_SECRETS]
    masked = [p for p in _reals(list(spec.get("masked", ())) + secrets) if inside_any(p, read_only + read_write)]
    return dict(spec, read_only=read_only, read_write=read_write, masked=masked)


def confined_command(spec: Optional[Dict[str, Any]], argv: Sequence[str]) -> List[str]:
    """`argv` started inside a completed bwrap spec; unchanged for any other mode."""
    if not spec or spec.get("mode") != "bwrap":
        return list(argv)
    args = bwrap_args(spec.get("bwrap") or "bwrap", spec["read_only"], spec["read_write"], spec["masked"],
                      spec.get("network", "none"))
    return [*args, "--", *argv]


def confined_environ(spec: Optional[Dict[str, Any]], scratch: str) -> Dict[str, str]:
    """What the environment of an interpreter confined by a completed spec needs: under bwrap,
    HOME and TMPDIR in its private /tmp; under Landlock, the rules it applies to itself
    (confine/inprocess.py) and `scratch` (made here, 0700) as HOME and TMPDIR; {} for other modes."""
    mode = (spec or {}).get("mode")
    if mode == "bwrap":
        return {"HOME": "/tmp", "TMPDIR": "/tmp"}
    if spec is None or mode != "landlock":
        return {}
    from .inprocess import ENV

    try:
        os.makedirs(scratch, mode=0o700)
    except FileExistsError:
        pass
    rules = landlock_rules(spec["read_only"], spec["read_write"], spec.get("network", "none"), scratch,
                           spec.get("masked", ()))
    return {ENV: json.dumps(rules), "HOME": scratch, "TMPDIR": scratch}


def inside_any(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _reals(paths: Sequence[str]) -> List[str]:
    return list(dict.fromkeys(os.path.realpath(os.path.expanduser(p)) for p in paths))
