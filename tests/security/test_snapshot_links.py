"""A restore never follows a link planted in the workspace out of it.

The attack: while Herald restores a snapshot again and again, a process of the workspace's
owner (root, and the generated non-root user) flips the snapshot's directories and files into
links to a root-owned directory outside the workspace, and back. Each restore may finish or
stop part way (it says so); the outside directory is never written, its files never changed.
And the engine restoring as a non-root user, raced by that same user: its own files outside the
workspace are never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from herald.backends.local import LocalBackend
from herald.checkpoints import SnapshotError, Snapshots
from herald.config import Settings
from tests.fixtures.accounts import ensure_user
from tests.fixtures.users import USER, User

RESTORES = 300
SECONDS = 20.0

FLIPPER = r'''
import os, sys, time
ws, outside, stop, started = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
deadline = time.monotonic() + float(sys.argv[4])
flips = 0
targets = [("sub", outside), ("sub/deeper", outside), ("a.txt", os.path.join(outside, "victim.txt")),
           ("sub/b.txt", os.path.join(outside, "victim.txt")), ("new", outside)]
while time.monotonic() < deadline and not os.path.exists(stop):
    for name, target in targets:
        path = os.path.join(ws, name)
        if "/" in name and os.path.islink(os.path.dirname(path)):
            continue  # its own link: the attacker attacks Herald, not the outside itself
        tmp = os.path.join(ws, ".flip-%d" % flips)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rename(path, tmp + ".away")
            os.symlink(target, tmp)
            os.rename(tmp, path)
            flips += 1
            if flips == 1:
                open(started, "w").close()
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
if len(sys.argv) > 6:
    open(sys.argv[6], "w").close()  # the attacker is gone
print(flips)
'''


def _digest(folder: Path) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        found[str(path.relative_to(folder))] = f"{info.st_mode:o} {info.st_uid} {hashlib.sha256(data).hexdigest()}"
    return found


def _attacker(kind: str, request: pytest.FixtureRequest) -> tuple[list[str], User | None]:
    """(the attacker's argv prefix and python, its user): the flipper needs only a stdlib python3,
    so where the `nonroot` fixture cannot run Herald as that user, its account runs /usr/bin/python3."""
    if kind == "root":
        if os.geteuid() != 0:
            pytest.skip("the root attacker needs the tests to run as root")
        return [sys.executable, "-I"], None
    if os.geteuid() != 0:
        return [sys.executable, "-I"], None  # already not root
    if shutil.which("useradd") is None or shutil.which("setpriv") is None or not os.path.exists("/usr/bin/python3"):
        pytest.skip("useradd, setpriv or /usr/bin/python3 missing: no non-root attacker here")
    entry = ensure_user(USER)
    user = User(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir, "/usr/bin/python3", "")
    return [*user.argv([]), "/usr/bin/python3", "-I"], user


@pytest.mark.parametrize("attacker", ["root", "nonroot"])
def test_a_flipping_link_never_leads_a_restore_out(attacker: str, request: pytest.FixtureRequest, tmp_path: Path,
                                                    settings: Settings) -> None:
    prefix, user = _attacker(attacker, request)
    base = Path(user.home if user else tmp_path) / f".herald-snaprace-{secrets.token_hex(4)}"
    outside = tmp_path / "outside"  # root's: the attacker wants Herald to write there
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched\n")
    (outside / "deeper").mkdir()
    before = _digest(outside)
    ws = base / "ws"
    ws.mkdir(parents=True)
    (ws / "sub" / "deeper").mkdir(parents=True)
    (ws / "a.txt").write_text("snapshot a\n")
    (ws / "sub" / "b.txt").write_text("snapshot b\n")
    (ws / "sub" / "deeper" / "c.txt").write_text("snapshot c\n")
    if user is not None and os.geteuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(base)], check=True)
    backend = LocalBackend(str(ws), settings=settings)
    snaps = Snapshots(backend, str(ws), settings)
    stop = base / "stop"
    try:
        snapshot = snaps.take()
        started = base / "started"
        argv = [*prefix, "-c", FLIPPER, str(ws), str(outside), str(stop), str(SECONDS), str(started)]
        flipper = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + SECONDS
        while not started.exists() and time.monotonic() < deadline and flipper.poll() is None:
            time.sleep(0.01)
        assert started.exists(), "the attacker never flipped a link"
        finished = stopped = 0
        while finished + stopped < RESTORES and time.monotonic() < deadline:
            try:
                snaps.restore(snapshot)
                finished += 1
            except SnapshotError as exc:
                assert "stopped part way" in str(exc)
                stopped += 1
        stop.touch()
        flips = int(flipper.communicate(timeout=SECONDS + 30)[0].strip() or 0)
        assert flips > 0 and finished + stopped > 0
        assert _digest(outside) == before
        # With the attacker gone, a restore puts everything back.
        snaps.restore(snapshot)
        assert (ws / "a.txt").read_text() == "snapshot a\n" and not (ws / "a.txt").is_symlink()
        assert (ws / "sub" / "deeper" / "c.txt").read_text() == "snapshot c\n"
        assert not (ws / "sub").is_symlink()
        assert sorted(os.listdir(ws)) == ["a.txt", "sub"]
    finally:
        stop.touch()
        snaps.close()
        backend.close()
        shutil.rmtree(base, ignore_errors=True)


# The engine restoring as a non-root user, against an attacker of that same user (a script is
# confined to the workspace, the restore is not): a file of that user outside the workspace is
# what the attacker is after. The engine's sources run as they do on a remote backend: a stdlib
# package of their own.
RESTORER = r'''
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from _snapengine.engine import SnapshotFailure, make_engine
ws, store, started, stop = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
engine = make_engine(ws, store, 1 << 20, 1000, 1 << 30)
snapshot = engine.take()["id"]
open(os.path.join(os.path.dirname(ws), "taken"), "w").close()
deadline = time.monotonic() + float(sys.argv[6])
while not os.path.exists(started) and time.monotonic() < deadline:
    time.sleep(0.01)
done = stopped = 0
while done + stopped < int(sys.argv[7]) and time.monotonic() < deadline:
    try:
        engine.restore(snapshot)
        done += 1
    except SnapshotFailure as exc:
        assert "stopped part way" in str(exc), exc
        stopped += 1
open(stop, "w").close()
while not os.path.exists(sys.argv[8]) and time.monotonic() < deadline + 30:
    time.sleep(0.01)  # the attacker's last flip is done: this restore puts everything back
engine.restore(snapshot)
print(json.dumps({"done": done, "stopped": stopped}))
'''


def test_a_non_root_restore_is_not_led_out_by_its_own_user(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    prefix, user = _attacker("nonroot", request)
    home = Path(user.home if user else tmp_path)
    base = home / f".herald-snaprace-{secrets.token_hex(4)}"
    engine = base / "engine" / "_snapengine"
    engine.mkdir(parents=True)
    source = Path(__file__).resolve().parents[2] / "herald" / "_sandbox" / "snapshot"
    for module in source.glob("*.py"):
        shutil.copy(module, engine / module.name)
    outside = base / "dotfiles"  # the user's own files outside the workspace, e.g. ~/.bashrc
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched\n")
    (outside / "deeper").mkdir()
    ws = base / "ws"
    (ws / "sub" / "deeper").mkdir(parents=True)
    (ws / "a.txt").write_text("snapshot a\n")
    (ws / "sub" / "b.txt").write_text("snapshot b\n")
    if user is not None:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(base)], check=True)
    before = _digest(outside)
    started, stop, gone = base / "started", base / "stop", base / "gone"
    try:
        restorer = subprocess.Popen(
            [*prefix, "-c", RESTORER, str(engine.parent), str(ws), str(base / "store"), str(started), str(stop),
             str(SECONDS), str(RESTORES), str(gone)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + SECONDS
        while not (base / "taken").exists() and time.monotonic() < deadline and restorer.poll() is None:
            time.sleep(0.01)
        flipper = subprocess.Popen(
            [*prefix, "-c", FLIPPER, str(ws), str(outside), str(stop), str(SECONDS), str(started), str(gone)],
            stdout=subprocess.PIPE, text=True)
        out, err = restorer.communicate(timeout=SECONDS + 60)
        flips = int(flipper.communicate(timeout=SECONDS + 30)[0].strip() or 0)
        assert restorer.returncode == 0, err
        found = json.loads(out)
        assert flips > 0 and found["done"] + found["stopped"] > 0, found
        assert _digest(outside) == before
        assert (ws / "a.txt").read_text() == "snapshot a\n" and not (ws / "sub").is_symlink()
    finally:
        stop.touch()
        shutil.rmtree(base, ignore_errors=True)
