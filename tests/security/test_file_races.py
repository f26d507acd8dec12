"""File tools act on what they checked: a link swapped after the policy's check never lets a
call read, write or search outside the workspace.

The attacks: a link in the workspace flips between a harmless file (or directory) and a 0600
file (or directory) outside it, while file tools are called on it: from a script whose own
thread flips the link (host mode, backend mode on the local backend; as root and as a generated
non-root user), and directly, with the swap made while the call, already checked, waits for the
lock a slow `patch` of the same path holds. Every call must be refused or harmless: no outside
content in any reply, the outside file never changed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from herald import Runtime
from herald._sandbox.beside.searchplace import ShellRan, SupervisorPlace
from herald._sandbox.search.core import search_files
from herald._sandbox.toolcore.base import ToolError
from herald._sandbox.toolcore.callroots import Confinement
from herald._sandbox.wire.grant import SearchGrant
from herald.tools.resources import Resource
from tests.fixtures.users import User

MARK = "TOPSECRET"  # + a token: outside content; no path or argument holds it
ITERATIONS = 150
SECONDS = 20.0
CALLS = {"sandbox.max_tool_calls": 5 * ITERATIONS + 10}

ATTACK = r'''
import json, os, threading, time
from hermes_tools import read_file, write_file, patch, search_files, ToolError

SECRET, OUT_FILE, OUT_DIR = {secret!r}, {out_file!r}, {out_dir!r}
os.makedirs("safe", exist_ok=True)
with open("harmless.txt", "w") as fh:
    fh.write("harmless line\n")
with open("safe/h.txt", "w") as fh:
    fh.write("harmless line\n")
stop = threading.Event()

def flip(link, inside, outside):
    i = 0
    while not stop.is_set():
        tmp = "%s.%d" % (link, i % 2)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(outside if i % 2 else inside, tmp)
        os.rename(tmp, link)
        i += 1

flippers = [threading.Thread(target=flip, args=("flip", "harmless.txt", OUT_FILE)),
            threading.Thread(target=flip, args=("flipdir", "safe", OUT_DIR))]
for t in flippers:
    t.start()
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
    attempt("read", lambda: read_file("flip"))
    attempt("write", lambda: write_file("flip", "harmless line\n"))
    attempt("patch", lambda: patch("flip", "line", "LINE" if n % 2 else "line!", replace_all=True))
    attempt("search", lambda: search_files(SECRET, path="flipdir"))
    attempt("list", lambda: search_files("*", target="files", path="flipdir"))
    n += 1
stop.set()
for t in flippers:
    t.join()
print(json.dumps({{"leaks": leaks, "n": n, "seen": seen}}))
'''


class Outside:
    """A 0600 file and a directory holding one, outside the workspace, with a secret in them."""

    def __init__(self, root: Path, owner: User | None = None) -> None:
        self.secret = MARK + secrets.token_hex(6)
        self.dir = root / "dir"
        self.file = root / "secret.txt"
        self.dir.mkdir(parents=True)
        self.content = f"{self.secret} line\n"
        for path in (self.file, self.dir / "inner.txt"):
            path.write_text(self.content)
            path.chmod(0o600)
        if owner is not None and os.geteuid() == 0:
            for path in (root, self.dir, self.file, self.dir / "inner.txt"):
                os.chown(path, owner.uid, owner.gid)
        self._before = self.digest()

    def digest(self) -> str:
        return hashlib.sha256(b"".join(p.read_bytes() for p in (self.file, self.dir / "inner.txt"))).hexdigest()

    def assert_untouched(self) -> None:
        assert self.digest() == self._before
        assert sorted(os.listdir(self.dir)) == ["inner.txt"]
        assert sorted(os.listdir(self.file.parent)) == ["dir", "secret.txt"]

    def attack(self) -> str:
        return ATTACK.format(secret=self.secret, out_file=str(self.file), out_dir=str(self.dir),
                             seconds=SECONDS, iterations=ITERATIONS)


def _verdict(output: str, outside: Outside) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    assert found["leaks"] == [], found
    assert found["n"] > 0 and not any(kind.endswith("ToolCallLimit") for kind in found["seen"]), found
    outside.assert_untouched()
    return found


@pytest.fixture
def outside(tmp_path: Path) -> Outside:
    return Outside(tmp_path / "outside")


@pytest.fixture
def root_outside() -> Iterator[Outside]:
    """As root, the outside secret is under /root, as an attacker would aim."""
    if os.geteuid() != 0:
        pytest.skip("not root: the /root variant needs root")
    where = Path(tempfile.mkdtemp(prefix="herald-race-", dir="/root"))
    try:
        yield Outside(where / "o")
    finally:
        shutil.rmtree(where)


@pytest.mark.parametrize("exec_mode", ["host", "backend"])
def test_a_flipping_link_never_leads_a_script_s_file_tools_out(make_runtime: Callable[..., Runtime],
                                                              outside: Outside, exec_mode: str) -> None:
    runtime = make_runtime(exec_mode=exec_mode, overrides=CALLS)
    result = runtime.execute(outside.attack(), timeout=SECONDS + 60)
    assert result.status == "success", result
    _verdict(result.output, outside)


def test_a_flipping_link_to_root_s_files_never_leads_out(make_runtime: Callable[..., Runtime],
                                                        root_outside: Outside) -> None:
    for exec_mode in ("host", "backend"):
        result = make_runtime(exec_mode=exec_mode, overrides=CALLS).execute(root_outside.attack(), timeout=SECONDS + 60)
        assert result.status == "success", result
        _verdict(result.output, root_outside)


@pytest.mark.parametrize("exec_mode", ["host", "backend"])
def test_a_non_root_user_s_flipping_link_never_leads_out(nonroot: User, exec_mode: str) -> None:
    home = Path(nonroot.home)
    root = home / f".herald-race-{secrets.token_hex(4)}"
    nonroot.run(["mkdir", "-m", "700", str(root)]).check_returncode()
    try:
        outside = Outside(root / "o", owner=nonroot)
        work = nonroot.run(["mktemp", "-d"]).stdout.strip()
        done = nonroot.herald(
            "exec",
            "--json",
            "--cwd",
            work,
            "--exec-mode",
            exec_mode,
            "-c",
            f"sandbox.timeout={SECONDS + 60}",
            "-c",
            f"sandbox.max_tool_calls={CALLS['sandbox.max_tool_calls']}",
            "-",
            input=outside.attack(),
            cwd=work,
            timeout=SECONDS + 120,
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["status"] == "success", result
        _verdict(result["output"], outside)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if "work" in locals():
            shutil.rmtree(work, ignore_errors=True)


# -- the swap made while a checked call waits for its lock -----------------------------------


def _call_into(
    reply: dict[str, Any], call: Callable[[str, Any], dict[str, Any]], tool: str, args: dict[str, Any]
) -> None:
    reply.update(call(tool, dict(args)))


def _swap(link: Path, target: Path) -> None:
    tmp = link.with_name(link.name + ".swap")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.rename(link)


@pytest.mark.parametrize("tool, args", [
    ("read_file", {"path": "flip"}),
    ("write_file", {"path": "flip", "content": "overwritten\n"}),
    ("patch", {"path": "flip", "old_string": "line", "new_string": "LINE"}),
    ("search_files", {"pattern": MARK, "path": "flipdir"}),
    ("search_files", {"pattern": "*", "target": "files", "path": "flipdir"}),
])
@pytest.mark.parametrize("engine", ["auto", "python"])
def test_a_link_swapped_while_the_call_waits_behind_a_patch_is_refused(
    make_runtime: Callable[..., Runtime], workspace: Path, outside: Outside, tool: str, args: dict[str, Any],
    engine: str,
) -> None:
    if engine == "python" and tool != "search_files":
        pytest.skip("the search engine matters to search_files only")
    runtime = make_runtime(overrides={"files.search": engine})
    (workspace / "harmless.txt").write_text("harmless line\n")
    (workspace / "safe").mkdir()
    (workspace / "safe" / "h.txt").write_text("harmless line\n")
    link = workspace / ("flipdir" if tool == "search_files" else "flip")
    inside, out = (
        (workspace / "safe", outside.dir) if tool == "search_files" else (workspace / "harmless.txt", outside.file)
    )
    dispatcher = runtime.dispatcher
    locks = dispatcher._locks  # what a slow patch of the same path holds, held here for as long as needed
    for _ in range(3):
        _swap(link, inside)
        reply: dict[str, Any] = {}
        # A patch of the path holds it exclusively: the call passes the policy's check (the link
        # leads inside) and waits; then the link is swapped to the outside secret.
        with locks.hold([Resource(f"file:{link}")]):
            caller = threading.Thread(target=functools.partial(_call_into, reply, dispatcher.call_direct, tool, args))
            caller.start()
            deadline = time.monotonic() + 30
            while locks._waiting == 0 and caller.is_alive() and time.monotonic() < deadline:
                time.sleep(0.001)
            assert locks._waiting == 1, ("the call never waited for the lock", reply)
            _swap(link, out)
        caller.join(60)
        assert not caller.is_alive()
        assert "error" in reply and reply["error"]["type"] == "PolicyRefused", reply
        assert "outside the workspace" in reply["error"]["message"], reply
        assert outside.secret not in json.dumps(reply)
        outside.assert_untouched()


class _SwappingPlace(SupervisorPlace):
    """A search place whose directory is replaced by a link out, under ripgrep's feet: after the
    search held and checked it, before each ripgrep command runs (the attacker's best moment)."""

    def __init__(self, searched: Path, outside: Path, confinement: Confinement) -> None:
        spec = {"python_only": False, "bin": "bash", "max_output_bytes": 1 << 20, "timeout": 60.0}
        lock, cancel = threading.Lock(), threading.Event()
        super().__init__(cast(SearchGrant, spec), 1 << 20, str(searched.parent), {}, lock, cancel, confinement)
        self.searched, self.outside, self.swaps = searched, outside, 0

    def run(self, command: str, timeout: float, workdir: str | None = None) -> ShellRan:
        if "--version" not in command and not self.searched.is_symlink():
            self.searched.rename(self.searched.with_name("moved-away"))
            self.searched.symlink_to(self.outside)
            self.swaps += 1
        return super().run(command, timeout, workdir)


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep is not installed: the ripgrep engine cannot run here")
@pytest.mark.parametrize("target", ["content", "files"])
def test_ripgrep_never_searches_a_directory_swapped_after_it_was_checked(
    workspace: Path, outside: Outside, target: str
) -> None:
    searched = workspace / "safe"
    searched.mkdir()
    (searched / "h.txt").write_text("harmless line\n")
    confinement = Confinement([str(workspace)], [str(workspace)])
    place = _SwappingPlace(searched, outside.dir, confinement)
    args = {
        "pattern": outside.secret if target == "content" else "*",
        "target": target,
        "file_glob": None,
        "limit": 50,
        "offset": 0,
        "timeout": 60.0,
        "path": "safe",
    }
    with pytest.raises(ToolError) as refused:
        search_files(place, args)
    assert place.swaps >= 1 and refused.value.error_type == "PolicyRefused", refused.value
    assert outside.secret not in str(refused.value) and "inner.txt" not in str(refused.value)
