"""File tools over SSH act on what they checked: a link in the workspace flipping between a
harmless file and a 0600 file outside it (owned by the SSH user, so nothing but the tools'
checks stands in the way) never lets a read show the outside file or a write change it.

- backend mode: the script runs on the host as the SSH user (the fixture's non-root user), and
  its own thread flips the link while its main thread calls the tools, which the supervisor
  runs there (open, then check where the opened descriptor is: _sandbox/toolcore/fileaccess.py);
- host mode: the script runs here and the tools go over SFTP; the link is flipped on the host
  (this machine) by a thread of the test. A read's handle is checked to hold the pinned file in
  the same flight as its OPEN (ssh/files.py check_opened); a write lands on the pinned file.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from herald import Runtime, Settings
from tests.fixtures.sshd import SSHServer

from .test_file_races import CALLS, MARK, SECONDS, Outside, _verdict

HOST_ATTACK = r'''
import json, time
from hermes_tools import read_file, write_file, terminal, ToolError
SECRET = {secret!r}
leaks, seen = [], {{}}

def attempt(kind, call):
    try:
        text = json.dumps(call())
        outcome = "ok"
    except ToolError as exc:
        text, outcome = str(exc), exc.error_type
    seen[kind + " " + outcome] = seen.get(kind + " " + outcome, 0) + 1
    if SECRET in text:
        leaks.append([kind, text[:300]])

deadline = time.monotonic() + {seconds}
n = 0
while n < {iterations} and time.monotonic() < deadline:
    terminal(":")  # a command ran: where paths lead is looked up anew, not taken from a moment ago
    attempt("read", lambda: read_file("flip"))
    attempt("write", lambda: write_file("flip", "harmless line\n"))
    attempt("read", lambda: read_file("safe/inner.txt"))  # `safe` itself is swapped for a link out
    attempt("write", lambda: write_file("safe/inner.txt", "harmless line\n"))
    n += 1
print(json.dumps({{"leaks": leaks, "n": n, "seen": seen}}))
'''


HOST_ITERATIONS = 1500  # the SFTP window is narrow: it took a few hundred tries to hit before

FLIPPER = r"""
import os, signal, sys
work, outside = sys.argv[1:]
flips = 0
def done(*_):
    print(flips, flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, done)
safe, real = os.path.join(work, "safe"), os.path.join(work, "safe.real")
while True:
    try:  # (a write may make `safe` anew in the moment it is gone: then the swap waits a turn)
        if flips % 2:  # the directory `safe` (a real one) gives way to a link to the outside directory
            os.rename(safe, real)
            os.symlink(os.path.join(os.path.dirname(outside), "dir"), safe)
        elif os.path.exists(real):
            os.unlink(safe)
            os.rename(real, safe)
    except OSError:
        pass
    tmp = os.path.join(work, "flip.%d" % (flips % 2))
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.symlink(outside if flips % 2 else "harmless.txt", tmp)
    os.rename(tmp, os.path.join(work, "flip"))
    flips += 1
"""


@pytest.fixture
def host_outside(sshd: SSHServer) -> Iterator[Outside]:
    """The secret in the SSH user's home, outside the workspace, readable by that user only."""
    entry = pwd.getpwnam(sshd.user)
    root = Path(entry.pw_dir) / f".herald-race-{secrets.token_hex(4)}"
    root.mkdir(mode=0o700)
    os.chown(root, entry.pw_uid, entry.pw_gid)
    try:
        yield Outside(root / "o", owner=SimpleNamespace(uid=entry.pw_uid, gid=entry.pw_gid))  # type: ignore[arg-type]  # only uid, gid read
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _runtime(backend: Any, settings: Settings, exec_mode: str, calls: int = CALLS["sandbox.max_tool_calls"]) -> Runtime:
    overrides = {"sandbox.max_tool_calls": calls}
    return Runtime(backend, settings=settings.with_overrides(overrides), exec_mode=exec_mode, transcript=False)


def _backend_mode_attack(ssh_backend: Any, settings: Settings, outside: Outside) -> dict[str, Any]:
    with _runtime(ssh_backend, settings, "backend") as runtime:
        result = runtime.execute(outside.attack(), timeout=SECONDS + 60)
    assert result.status == "success", result
    found: dict[str, Any] = json.loads(result.output.strip().splitlines()[-1])
    outside.assert_untouched()  # no write, patch or anything else changed the outside file
    return found


def test_backend_mode_a_script_s_flipping_link_never_leads_read_or_write_out(
        ssh_backend: Any, settings: Settings, host_outside: Outside) -> None:
    found = _backend_mode_attack(ssh_backend, settings, host_outside)
    assert [leak for leak in found["leaks"] if leak[0] != "search"] == [], found
    assert found["n"] > 0 and found["seen"].get("read ok", 0) > 0, found  # the tools worked between flips


def test_backend_mode_a_script_s_flipping_link_never_leads_a_search_out(
        ssh_backend: Any, settings: Settings, host_outside: Outside) -> None:
    _verdict(json.dumps(_backend_mode_attack(ssh_backend, settings, host_outside)), host_outside)


def test_host_mode_a_link_flipped_on_the_host_never_leads_sftp_out(ssh_backend: Any, settings: Settings,
                                                                    sshd: SSHServer, host_outside: Outside) -> None:
    entry = pwd.getpwnam(sshd.user)
    work = Path(ssh_backend.cwd)
    harmless = work / "harmless.txt"
    harmless.write_text("harmless line\n")
    os.chown(harmless, entry.pw_uid, entry.pw_gid)
    (work / "flip").symlink_to("harmless.txt")
    (work / "safe").mkdir()
    (work / "safe" / "inner.txt").write_text("harmless line\n")
    for made in (work / "safe", work / "safe" / "inner.txt"):
        os.chown(made, entry.pw_uid, entry.pw_gid)
    # A process of its own (not a thread sharing Herald's GIL), flipping as fast as it can.
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(work), str(host_outside.file)],
                               stdout=subprocess.PIPE, text=True)
    try:
        with _runtime(ssh_backend, settings, "host", calls=5 * HOST_ITERATIONS + 10) as runtime:
            script = HOST_ATTACK.format(secret=host_outside.secret, seconds=SECONDS, iterations=HOST_ITERATIONS)
            result = runtime.execute(script, timeout=SECONDS + 60)
    finally:
        flipper.terminate()
        flips = int(flipper.communicate(timeout=30)[0].split()[-1])
    assert result.status == "success", result
    found = _verdict(result.output, host_outside)
    assert flips > found["n"], (flips, found)  # the link flipped throughout
    # The attack reached the operation (the check allowed the path) again and again.
    assert found["seen"].get("read ok", 0) + found["seen"].get("read PermissionDenied", 0) > 0, found


class ContainerOutside(Outside):
    """The same 0600 file and directory, made inside the container (outside /workspace)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.secret = MARK + secrets.token_hex(6)
        root = f"/srv/herald-race-{secrets.token_hex(4)}"
        self.dir, self.file = Path(root) / "dir", Path(root) / "secret.txt"  # paths in the container
        self.content = f"{self.secret} line\n"
        made = backend.run(f"mkdir -p {self.dir} && for f in {self.file} {self.dir}/inner.txt; do "
                           f"printf '%s\\n' '{self.secret} line' > $f && chmod 600 $f; done", timeout=30)
        assert made.exit_code == 0, made.output
        self._before = self.digest()

    def digest(self) -> str:
        said = self.backend.run(
            f"cat {self.file} {self.dir}/inner.txt | sha256sum; ls -A {self.dir} {self.file.parent}", timeout=30
        )
        return str(said.output)

    def assert_untouched(self) -> None:
        assert self.digest() == self._before


def test_docker_backend_mode_a_script_s_flipping_link_never_leads_read_or_write_out(
        docker_backend: Any, settings: Settings) -> None:
    outside = ContainerOutside(docker_backend)
    found = _backend_mode_attack(docker_backend, settings, outside)
    assert [leak for leak in found["leaks"] if leak[0] != "search"] == [], found
    assert found["n"] > 0 and found["seen"].get("read ok", 0) > 0, found
