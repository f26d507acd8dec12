"""The Landlock fallback as an attacker sees it, as root and as a generated non-root user.

Each test confines a fresh interpreter exactly as a sandbox child confines itself under
`sandbox.isolation = "landlock"` (_sandbox/confine/inprocess.py, with the rules isolate.py builds), then
tries what a hostile script would: other socket families, the loopback services of the host, a
host unix socket, the secrets root owns, the home's credential stores and Herald's data, the
capabilities it started with. Whatever it reaches must be what the run's label says
(Isolation.describe). Verdicts come from the child's answers and from what the test's own
listeners received, never from timing.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herald._sandbox.confine import bwrap as isolate
from herald._sandbox.confine import landlock, seccomp
from herald.runtime.sandbox import isolation
from tests.fixtures.accounts import ensure_user

ABI = landlock.abi_version()
pytestmark = pytest.mark.skipif(not ABI or not seccomp.supported(),
                                reason=f"Landlock ABI {ABI} / seccomp filter unsupported on {os.uname().machine}")
REPO = Path(__file__).resolve().parents[2]
SECRET = "herald-landlock-attack-secret"
LABEL = isolation.Isolation("landlock").describe
UNIX_REACHABLE = "host unix sockets reachable" in LABEL

# JSON in the first argument: the rules, then what to attack. The sandbox package is imported as
# the zygote imports it (a top-level `_sandbox`), so a bare system interpreter can run this.
CHILD = r'''
import json, os, socket, sys
config = json.loads(sys.argv[1])
sys.path.insert(0, config["package_parent"])
from _sandbox.confine.inprocess import confine
confine(config["rules"])
os.chdir(config["workspace"])
found = {}
def attempt(name, action):
    try:
        found[name] = ["ok", action()]
    except Exception as exc:
        found[name] = ["refused", type(exc).__name__]
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    return s.sendto(b"escaped", ("127.0.0.1", config["udp_port"]))
def unix(address):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(address)
    return s.send(b"escaped")
attempt("udp", udp)
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", config["tcp_port"]), timeout=10).close())
attempt("inet6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())
attempt("raw_icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
attempt("ping_icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP).close())
attempt("unix_pair", lambda: [s.close() for s in socket.socketpair()] and "pair")
attempt("unix_path", lambda: unix(config["unix_path"]))
attempt("unix_abstract", lambda: unix(config["abstract"]))
for name, path in config["reads"].items():
    attempt("read_" + name, lambda path=path: len(open(path, "rb").read()))
for name, path in config["writes"].items():
    attempt("write_" + name, lambda path=path: open(path, "a").write("x"))
attempt("symlink_into_ssh", lambda: os.symlink(config["workspace_file"], config["authorized_keys"]))
attempt("rename_into_ssh", lambda: os.rename(config["workspace_file"], config["authorized_keys"]))
with open("/proc/self/status") as f:
    found["status"] = dict(line.split(":\t", 1) for line in f.read().splitlines()
                           if line.startswith(("Cap", "NoNewPrivs")))
print(json.dumps(found))
'''


@dataclass
class Attacker:
    name: str
    uid: int
    gid: int
    python: str  # an interpreter this user can run (the sandbox package needs only the stdlib)

    def argv(self, argv: list[str]) -> list[str]:
        if self.uid == os.geteuid():
            return argv
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", *argv]


def _system_python() -> str | None:
    """A Python anyone may run: the sandbox package needs only the standard library."""
    for candidate in (f"/usr/bin/python3.{sys.version_info.minor}", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(params=["root", "nonroot"])
def attacker(request: pytest.FixtureRequest) -> Attacker:
    if request.param == "root":
        if os.geteuid() != 0:
            pytest.skip("the root attacks need root")
        return Attacker("root", 0, 0, sys.executable)
    python = _system_python()
    if os.geteuid() != 0:
        return Attacker("self", os.geteuid(), os.getegid(), python or sys.executable)
    if python is None or shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("no /usr/bin/python3, useradd or setpriv: cannot attack as a non-root user")
    entry = ensure_user("heraldnobody")
    return Attacker(entry.pw_name, entry.pw_uid, entry.pw_gid, python)


@pytest.fixture
def arena(attacker: Attacker) -> Iterator[Path]:
    """A directory both attackers can reach (pytest's tmp_path is root's own)."""
    base = Path(tempfile.mkdtemp(prefix="herald-landlock-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _package_parent(arena: Path) -> str:
    """A copy of the sandbox package where the attacker can read it (a checkout may lie in a
    directory other users cannot enter), as Herald copies it for its own sandboxes."""
    parent = arena / "pkg"
    if not (parent / "_sandbox").exists():
        shutil.copytree(REPO / "herald" / "_sandbox", parent / "_sandbox",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for path in [parent, *parent.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    return str(parent)


@pytest.fixture
def udp_port() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.setblocking(False)
    yield server
    server.close()


def _own(path: Path, who: Attacker, mode: int) -> None:
    os.chown(path, who.uid, who.gid)
    path.chmod(mode)


def _home(arena: Path, who: Attacker) -> Path:
    """The attacker's home: a project, notes, an SSH key and Herald's data (a transcript)."""
    home = arena / "home"
    for sub in (".ssh", "proj", ".local/share/herald/transcripts"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "id_ed25519").write_text(f"PRIVATE KEY {SECRET}\n")
    (home / ".local/share/herald/transcripts" / "t.jsonl").write_text(f'{{"secret": "{SECRET}"}}\n')
    (home / "notes.txt").write_text("the user's own notes\n")
    (home / "proj" / "main.py").write_text("print('hi')\n")
    for path in [home, *home.rglob("*")]:
        _own(path, who, 0o700 if path.is_dir() else 0o600)
    return home


def _unix_server(arena: Path) -> Iterator[tuple[str, str]]:
    sockdir = arena / "host-service"
    sockdir.mkdir(mode=0o755)
    path = str(sockdir / "s")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)  # a world-writable service socket, as /run has them
    server.listen(8)
    abstract = f"\0herald-landlock-attack-{os.getpid()}"
    abstract_server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_server.bind(abstract)
    abstract_server.listen(8)
    try:
        yield path, abstract
    finally:
        server.close()
        abstract_server.close()


def _attack(who: Attacker, arena: Path, workspace_is_home: bool, tcp_port: int, udp: socket.socket,
            *, extra: str = "") -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    home = _home(arena, who)
    workspace = home if workspace_is_home else arena / "work"
    workspace.mkdir(exist_ok=True)
    _own(workspace, who, 0o700)
    (workspace / "planted.txt").write_text("attacker's key\n")
    _own(workspace / "planted.txt", who, 0o600)
    scratch = arena / "scratch"
    scratch.mkdir()
    _own(scratch, who, 0o700)
    masked = [str(home / name) for name in isolate.HOME_SECRETS]
    read_only = isolate.interpreter_dirs(who.python)
    rules = isolate.landlock_rules(read_only, [str(workspace)], "none", str(scratch), masked)
    host_keys = sorted(glob.glob("/etc/ssh/ssh_host_*_key"))
    disks = sorted(p for p in glob.glob("/dev/[svx]d[a-z]") + glob.glob("/dev/nvme[0-9]n[0-9]")
                   if stat.S_ISBLK(os.stat(p).st_mode))
    reads = {"shadow": "/etc/shadow", "ssh_key": str(home / ".ssh" / "id_ed25519"),
             "herald_data": str(home / ".local/share/herald/transcripts/t.jsonl"),
             "notes": str(home / "notes.txt"), "passwd": "/etc/passwd"}
    reads.update({"host_key": host_keys[0]} if host_keys else {})
    reads.update({"disk": disks[0]} if disks else {})
    (workspace / "proj").mkdir(exist_ok=True)
    _own(workspace / "proj", who, 0o700)
    writes = {"ssh_key": str(home / ".ssh" / "id_ed25519"), "workspace_sub": str(workspace / "proj" / "out.txt"),
              "etc": "/etc/herald-landlock-attack"}
    servers = _unix_server(arena)
    unix_path, abstract = next(servers)
    try:
        config = {"package_parent": _package_parent(arena), "rules": rules, "workspace": str(workspace),
                  "udp_port": udp.getsockname()[1], "tcp_port": tcp_port, "unix_path": unix_path,
                  "abstract": abstract, "reads": reads, "writes": writes,
                  "workspace_file": str(workspace / "planted.txt"),
                  "authorized_keys": str(home / ".ssh" / "authorized_keys")}
        code = CHILD + extra
        done = subprocess.run(who.argv([who.python, "-I", "-B", "-c", code, json.dumps(config)]),
                              capture_output=True, text=True, timeout=120, cwd="/", env={"PATH": "/usr/bin:/bin"})
    finally:
        next(servers, None)
    found = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 and done.stdout else {}
    return done, found


@pytest.mark.parametrize("workspace_is_home", [False, True], ids=["workspace", "home-as-workspace"])
def test_a_confined_script_reaches_only_what_the_label_says(
    attacker: Attacker, arena: Path, listener: int, udp_port: socket.socket, workspace_is_home: bool
) -> None:
    done, found = _attack(attacker, arena, workspace_is_home, listener, udp_port)
    assert done.returncode == 0, done.stderr
    assert LABEL == "landlock (no IP network; host unix sockets reachable)"
    for attack in ("udp", "tcp", "inet6", "netlink", "packet", "raw_icmp", "ping_icmp"):
        assert found[attack] == ["refused", "PermissionError"], (attack, found[attack])
    with pytest.raises(BlockingIOError):  # the child is gone: a datagram it sent would be queued here
        udp_port.recv(64)
    assert found["unix_pair"] == ["ok", "pair"]  # what the run needs (RPC, multiprocessing)
    # The label and the behaviour agree: a host unix socket is reachable exactly when it says so.
    assert (found["unix_path"][0] == "ok") == UNIX_REACHABLE, found["unix_path"]
    if ABI >= 6:
        assert found["unix_abstract"][0] == "refused", found["unix_abstract"]
    else:
        assert UNIX_REACHABLE
    for secret in ("shadow", "ssh_key", "herald_data", "host_key", "disk"):
        assert found.get("read_" + secret, ["refused"])[0] == "refused", (secret, found["read_" + secret])
    assert found["read_passwd"][0] == "ok"
    assert (found["read_notes"][0] == "ok") == workspace_is_home  # the home is not seen unless it is the workspace
    assert found["write_ssh_key"][0] == "refused" and found["write_etc"][0] == "refused"
    assert found["write_workspace_sub"] == ["ok", 1]
    for attack in ("symlink_into_ssh", "rename_into_ssh"):  # planting an authorized_keys
        assert found[attack][0] == "refused", (attack, found[attack])
    home = arena / "home"
    assert not (home / ".ssh" / "authorized_keys").exists(), "the script planted a key"
    assert (home / ".ssh" / "id_ed25519").read_text() == f"PRIVATE KEY {SECRET}\n"
    assert not os.path.exists("/etc/herald-landlock-attack")
    status = {name: value.strip() for name, value in found["status"].items()}
    for name in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert int(status[name], 16) == 0, status
    assert status["NoNewPrivs"] == "1"
    if attacker.uid == 0:  # dropping the bounding set needs CAP_SETPCAP; without it NoNewPrivs keeps it unused
        assert int(status["CapBnd"], 16) == 0, status


def test_with_the_host_network_only_raw_and_packet_sockets_are_refused(
    attacker: Attacker, arena: Path, listener: int, udp_port: socket.socket
) -> None:
    home = _home(arena, attacker)
    scratch = arena / "scratch"
    scratch.mkdir()
    _own(scratch, attacker, 0o700)
    rules = isolate.landlock_rules(isolate.interpreter_dirs(attacker.python), [str(home / "proj")], "host",
                                   str(scratch))
    code = r'''
import json, socket, sys
sys.path.insert(0, sys.argv[2])
from _sandbox.confine.inprocess import confine
confine(json.loads(sys.argv[1]))
found = {}
for name, args in {"udp": (socket.AF_INET, socket.SOCK_DGRAM), "netlink": (socket.AF_NETLINK, socket.SOCK_RAW),
                   "raw": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                   "raw6": (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
                   "packet": (socket.AF_PACKET, socket.SOCK_RAW)}.items():
    try:
        socket.socket(*args).close()
        found[name] = "ok"
    except OSError as exc:
        found[name] = type(exc).__name__
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b"allowed", ("127.0.0.1", int(sys.argv[3])))
s = socket.create_connection(("127.0.0.1", int(sys.argv[4])), timeout=10)
print(json.dumps(found))
'''
    done = subprocess.run(attacker.argv([attacker.python, "-I", "-B", "-c", code, json.dumps(rules),
                                         _package_parent(arena), str(udp_port.getsockname()[1]), str(listener)]),
                          capture_output=True, text=True, timeout=120, cwd="/")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {"udp": "ok", "netlink": "ok", "raw": "PermissionError", "raw6": "PermissionError",
                     "packet": "PermissionError"}
    assert udp_port.recv(64) == b"allowed"
    assert isolation.Isolation("landlock", network="host").describe == "landlock (host network)"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x32 system calls exist on x86_64 only")
def test_a_system_call_of_another_abi_kills_the_process(attacker: Attacker, arena: Path, listener: int,
                                                        udp_port: socket.socket) -> None:
    # The filter knows x86_64's numbers: an x32 socket() (41 | 0x40000000) must not slip past it.
    extra = ("import ctypes\nlibc = ctypes.CDLL(None)\nlibc.syscall.restype = ctypes.c_long\n"
             "libc.syscall(ctypes.c_long(0x40000000 | 41), 2, 2, 0)\nprint('survived')\n")
    done, _ = _attack(attacker, arena, False, listener, udp_port, extra=extra)
    assert done.returncode == -signal.SIGSYS, (done.returncode, done.stdout[-300:], done.stderr[-300:])
    assert "survived" not in done.stdout


def test_confinement_refuses_to_run_with_a_second_thread() -> None:
    code = r'''
import sys, threading
sys.path.insert(0, sys.argv[1])
from _sandbox.confine.inprocess import ConfineError, confine
stop = threading.Event()
threading.Thread(target=stop.wait).start()
try:
    confine({"read_only": [], "read_write": [], "network": False})
    print("confined")
except ConfineError as exc:
    print("refused:", exc)
stop.set()
'''
    done = subprocess.run([sys.executable, "-I", "-B", "-c", code, str(REPO / "herald")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused:") and "confine: 2 threads" in done.stdout, done.stdout


def test_the_allowed_set_leaves_out_exactly_the_masked_paths(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for sub in ("a/keep", "a/secret/deep", "b", "c/x/y"):
        (root / sub).mkdir(parents=True)
    (root / "a" / "file").write_text("x")
    (root / "a" / "link").symlink_to(root / "a" / "secret")
    whole, listed = landlock.beneath_except([str(root), str(root / "c" / "x" / "y")],
                                            [str(root / "a" / "secret"), str(root / "c" / "x")])
    assert sorted(whole) == sorted(str(root / p) for p in ("a/keep", "a/file", "b"))
    assert sorted(listed) == sorted(str(root / p) for p in ("", "a", "c"))
