"""The backend's sandbox cache (_sandbox/sandboxcache.py), as an attacker sees it: the next
session's supervisor imports the sandbox files a hostile script may have rewritten, so nothing
the script leaves in the cache may run there, whatever it tried; a cache left damaged (a setup
killed mid-unpack, a file lost or changed) is rebuilt; the probe's cached answer can only say
what was found, for the machine as it still is.

The SSH cases run on the test sshd (this machine) as its user; what they damage or check on the
backend they do through the backend (`run`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald._sandbox import sandboxcache
from herald.backends.base import Backend
from herald.runtime.sandbox import isolation
from tests.runtime._helpers import run_ok

PLANTED = "planted code ran"
# The script's attack on what the next session imports; CACHE_ROOT, MARKER and HOW are prepended.
ATTACK = r'''
import importlib.util, json, os, sys, hermes_tools
from importlib._bootstrap_external import _code_to_timestamp_pyc
PAYLOAD = "\nopen(%r, 'a').write(__file__ + '\\n')  # planted code ran\n" % MARKER
done = {"wrote": [], "refused": 0}
def attempt(path, action):
    try:
        action()
        done["wrote"].append(path)
    except OSError:
        done["refused"] += 1
def rewrite(path):  # in place: through every hard link to it
    with open(path, "a") as f:
        f.write(PAYLOAD)
def shadow(directory):  # a stdlib module the supervisor imports, and bytecode its import trusts
    attempt(os.path.join(directory, "json.py"), lambda: open(os.path.join(directory, "json.py"), "w").write(PAYLOAD))
    source = os.path.join(directory, "_hermes_runtime", "supervisor.py")
    if os.path.exists(source):
        found = os.stat(source)
        code = compile(open(source).read() + PAYLOAD, source, "exec")
        pyc = importlib.util.cache_from_source(source)
        def plant():
            os.makedirs(os.path.dirname(pyc), exist_ok=True)
            open(pyc, "wb").write(_code_to_timestamp_pyc(code, found.st_mtime, found.st_size))
        attempt(pyc, plant)
package = done["package"] = os.path.dirname(hermes_tools.__file__)
places = [package] + [os.path.join(CACHE_ROOT, n) for n in (os.listdir(CACHE_ROOT) if os.path.isdir(CACHE_ROOT) else [])]
for place in places:
    if HOW == "shadow":
        shadow(place)
        continue
    for directory, _, names in os.walk(place):
        for name in names:
            if name.endswith(".py"):
                attempt(os.path.join(directory, name), lambda p=os.path.join(directory, name): rewrite(p))
print(json.dumps(done))
'''


def _cache_root(backend: Backend) -> str:
    return backend.run('printf %s "${TMPDIR:-/tmp}/herald-cache-$(id -u)"', timeout=30).output.strip()


def _newest_version(backend: Backend, root: str) -> str:
    listed = backend.run(f"ls -t {shlex.quote(root)}", timeout=30).output.split()
    versions = [name for name in listed if sandboxcache._is_digest(name)]
    assert versions, f"no sandbox version cached in {root}: {listed}"
    return os.path.join(root, versions[0])


def _session(sshd: Any, settings: Settings, workspace: str, **overrides: Any) -> tuple[Backend, Runtime]:
    from herald.backends.ssh import SSHBackend

    backend = SSHBackend(sshd.spec, cwd=workspace, settings=settings.with_overrides(sshd.overrides()))
    runtime = Runtime(backend, settings=settings.with_overrides(overrides), exec_mode="backend", transcript=False)
    return backend, runtime


@pytest.fixture
def ssh_workspace(sshd: Any) -> Iterator[str]:
    workspace = sshd.make_workspace()
    yield workspace
    sshd.remove_workspace(workspace)


@pytest.mark.parametrize("how", ["rewrite", "shadow"])
@pytest.mark.parametrize("confined", [True, False], ids=["isolated", "isolation-none"])
def test_what_a_script_leaves_in_the_cache_never_runs_in_the_next_session(
    sshd: Any, settings: Settings, ssh_workspace: str, how: str, confined: bool
) -> None:
    if confined and isolation.bwrap_problem() is not None:
        pytest.skip(f"bubblewrap unusable here: {isolation.bwrap_problem()}")
    overrides = {} if confined else {"sandbox.isolation": "none"}
    marker = os.path.join(ssh_workspace, "planted-marker")
    backend, runtime = _session(sshd, settings, ssh_workspace, **overrides)
    try:
        run_ok(runtime, "print('the cache holds this version')")
        root = _cache_root(backend)
        attack = f"CACHE_ROOT = {root!r}\nMARKER = {marker!r}\nHOW = {how!r}\n" + ATTACK
        done = json.loads(run_ok(runtime, attack).output)
        if confined:
            assert done["wrote"] == [], done  # the package is read-only and the cache out of sight
        else:
            assert any(path.startswith(root) for path in done["wrote"]), done  # it did reach the cache
    finally:
        runtime.close()
        backend.close()
    for fork_server in (True, False):
        backend, runtime = _session(sshd, settings, ssh_workspace, **{**overrides, "sandbox.fork_server": fork_server})
        try:
            for _ in range(2):
                assert run_ok(runtime, "print(1)").output == "1\n"
        finally:
            runtime.close()
            backend.close()
    # Unconfined, the script could rewrite its own session's files (a successor started there may
    # have run them: the script's own privileges); never what another session imports.
    ran = Path(marker).read_text().split() if os.path.exists(marker) else []
    assert not confined or not ran, ran
    assert all(path.startswith(done["package"] + "/") for path in ran), f"planted code ran in another session: {ran}"
    left = _planted_left(sshd, settings, ssh_workspace, root)
    assert left == "", f"the planted code is still in the cache: {left}"


def _planted_left(sshd: Any, settings: Settings, workspace: str, root: str) -> str:
    backend, runtime = _session(sshd, settings, workspace)
    try:
        version = _newest_version(backend, root)
        run_ok(runtime, "print('rebuilt, if need be')")
        return backend.run(f"grep -rl {shlex.quote(PLANTED)} {shlex.quote(version)}; ls -a {shlex.quote(version)} "
                           "| grep -v -x -e . -e .. -e hermes_tools.py -e _hermes_runtime; true", timeout=30).output.strip()
    finally:
        runtime.close()
        backend.close()


DAMAGE = {
    "missing": "rm {v}/_hermes_runtime/client.py",
    "truncated": ": > {v}/_hermes_runtime/bootstrap.py",
    "changed": "printf '\\n# changed\\n' >> {v}/_hermes_runtime/frames.py",
    "bytecode": "mkdir {v}/_hermes_runtime/__pycache__ && : > {v}/_hermes_runtime/__pycache__/frames.cpython-311.pyc",
    "symlink": "cp {v}/hermes_tools.py {v}.stub && ln -sf {v}.stub {v}/hermes_tools.py",
    "open-to-others": "chmod 0755 {v}",
    "killed-mid-unpack": ("mv {v} {t} && rm {t}/_hermes_runtime/[a-m]*.py && touch -d '2 hours ago' {t}"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_is_rebuilt(sshd: Any, settings: Settings, ssh_workspace: str, damage: str) -> None:
    backend, runtime = _session(sshd, settings, ssh_workspace)
    try:
        run_ok(runtime, "print('cached')")
    finally:
        runtime.close()
    root = _cache_root(backend)
    version = _newest_version(backend, root)
    saved = f"{version}.saved-{os.getpid()}"
    leftover = os.path.join(root, f".new-{os.path.basename(version)}-1")
    try:
        backend.run(f"cp -a {version} {saved}", timeout=30)
        command = DAMAGE[damage].format(v=shlex.quote(version), t=shlex.quote(leftover))
        assert backend.run(command, timeout=30).exit_code == 0
        backend2, runtime2 = _session(sshd, settings, ssh_workspace)
        try:
            assert run_ok(runtime2, "import hermes_tools\nprint(1)").output == "1\n"
        finally:
            runtime2.close()
            backend2.close()
        same = backend.run(f"diff -r --no-dereference {version} {saved} && stat -c %a {version}", timeout=30)
        assert same.exit_code == 0 and same.output.strip().endswith("700"), same.output
        assert backend.run(f"test -e {leftover}", timeout=30).exit_code != 0, "a killed setup's leftover stays"
    finally:
        backend.run(f"rm -rf {saved} {version}.stub {leftover}", timeout=30)
        backend.close()


# -- the cache's pieces, on this machine -----------------------------------------------------


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR for the cache: a directory of this test's own."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


FILES = {"hermes_tools.py": "import _hermes_runtime\n", "_hermes_runtime/__init__.py": "", "_hermes_runtime/a.py": "A = 1\n"}


def test_a_cache_root_not_safely_ours_is_not_used(tmpdir_env: Path) -> None:
    root = tmpdir_env / f"herald-cache-{os.getuid()}"
    elsewhere = tmpdir_env / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root.symlink_to(elsewhere)
    assert sandboxcache.cache_root() is None  # a link (planted to redirect us)
    root.unlink()
    root.mkdir(mode=0o700)
    root.chmod(0o733)
    assert sandboxcache.cache_root() is None  # others may write in it
    root.chmod(0o700)
    if os.getuid() == 0:
        os.chown(root, 65534, 65534)
        assert sandboxcache.cache_root() is None  # someone else's
        os.chown(root, 0, 0)
    assert sandboxcache.cache_root() == str(root)
    session = tmpdir_env / "session"
    session.mkdir()
    root.chmod(0o755)
    assert sandboxcache.install(FILES, str(session), "a" * 64, sandboxcache.cache_root()) == "unpacked"
    assert (session / "_hermes_runtime" / "a.py").read_text() == "A = 1\n"
    assert os.listdir(root) == []  # nothing kept where others could enter


def test_a_session_links_a_checked_version_and_never_writes_through_it(tmpdir_env: Path) -> None:
    root = sandboxcache.cache_root()
    assert root is not None
    name = "b" * 64
    first, second, third = (tmpdir_env / n for n in ("one", "two", "three"))
    for session in (first, second, third):
        session.mkdir()
    assert sandboxcache.install(FILES, str(first), name, root) == "unpacked"
    assert sandboxcache.install(FILES, str(second), name, root) == "cached"
    kept = Path(root, name, "_hermes_runtime", "a.py")
    assert os.stat(second / "_hermes_runtime" / "a.py").st_ino == kept.stat().st_ino
    changed = dict(FILES, **{"_hermes_runtime/a.py": "A = 2\n"})
    (third / "_hermes_runtime").mkdir()
    os.link(kept, third / "_hermes_runtime" / "a.py")  # a name already there, linked to the cache
    assert sandboxcache.install(changed, str(third), name, root) == "unpacked"
    assert (third / "_hermes_runtime" / "a.py").read_text() == "A = 2\n"
    assert (second / "_hermes_runtime" / "a.py").read_text() == "A = 1\n"  # replaced, not written through
    assert sandboxcache.holds(str(Path(root, name)), changed)
    assert stat.S_IMODE(Path(root, name).stat().st_mode) == 0o700


def test_old_versions_are_removed_beyond_the_bound(tmpdir_env: Path) -> None:
    root = sandboxcache.cache_root()
    assert root is not None
    names = [f"{i:064x}" for i in range(sandboxcache.KEEP_VERSIONS + 3)]
    for age, name in enumerate(reversed(names)):
        session = tmpdir_env / f"s{age}"
        session.mkdir()
        sandboxcache.install(dict(FILES, v=name), str(session), name, root)
        os.utime(os.path.join(root, name), (time.time() - 1000 + age, time.time() - 1000 + age))
        shutil.rmtree(session)
    kept = sorted(n for n in os.listdir(root) if sandboxcache._is_digest(n))
    assert len(kept) == sandboxcache.KEEP_VERSIONS
    assert names[0] in kept  # the last one made (the newest) stays


def test_the_probe_answer_is_reused_only_for_the_same_machine_state(tmpdir_env: Path) -> None:
    if not shutil.which("bwrap"):
        pytest.skip("no bwrap on PATH: the probe runs nothing worth keeping")
    root = sandboxcache.cache_root()
    files = {sandboxcache.ISOLATE_FILE: "probe code"}
    key = sandboxcache.probe_key(files)
    assert key is not None and sandboxcache.known_probe(root, key) is None
    sandboxcache.remember_probe(root, key, {"bwrap": "/x/bwrap", "bwrap_problem": "cannot", "landlock": 3})
    assert sandboxcache.known_probe(root, key) is None  # "does not work" is never kept
    sandboxcache.remember_probe(root, key, {"bwrap": "/x/bwrap", "bwrap_problem": None, "landlock": 3})
    found = sandboxcache.known_probe(root, key)
    assert found == {"bwrap": shutil.which("bwrap"), "bwrap_problem": None, "landlock": 3}  # bwrap as found now
    assert sandboxcache.probe_key({sandboxcache.ISOLATE_FILE: "other probe code"}) != key
    assert sandboxcache.known_probe(root, key.replace("]", ", 1]", 1)) is None  # another machine state
    assert root is not None
    kept = Path(root, sandboxcache.PROBE_FILE)
    old = time.time() - sandboxcache.PROBE_MAX_AGE - 1
    os.utime(kept, (old, old))
    assert sandboxcache.known_probe(root, key) is None  # too old: probed again
