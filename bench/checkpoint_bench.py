"""Workspace snapshots and session checkpoints: a snapshot of an unchanged 1,000-file tree (the
stat index: nothing is read), a restore of a 1,000-file checkpoint (every file rewritten, then
put back), and what a checkpoint adds to a `print(1)` run (checkpoints on vs off). On this
machine (the engine in-process), over SSH and in Docker (the engine is a python3 process there).

The trees are tests/checkpoints/trees.py's (built where the workspace is); the SSH and Docker
services are the tests' fixtures.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from herald import Runtime, Settings
from herald.backends import Backend
from herald.backends.local import LocalBackend
from herald.checkpoints import Snapshots
from tests.checkpoints.conftest import Tree

from .report import Metric, print_table

RUNS = 30  # print(1) runs per setting
SNAPSHOTS = 15
RESTORES = 8
# Every file of the tree rewritten (same names, new bytes), as a run that changed them all would.
REWRITE_ALL = "for f in d*/e*/f*.txt; do echo changed > \"$f\"; done"


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def _measure(where: str, backend: Backend, settings: Settings) -> list[Metric]:
    tree = Tree(backend)
    tree("build")
    snaps = Snapshots(backend, tree.root, settings)
    unchanged = Metric(f"snapshot of an unchanged 1,000-file tree ({where})", "ms", None,
                       note="stat index: every entry stat'ed, no file read")
    restore = Metric(f"restore of a 1,000-file checkpoint ({where})", "ms", None,
                     note="1,000 files rewritten, then put back (temp file + rename each)")
    try:
        first = snaps.take()
        time.sleep(2.5)  # past the index's racy window: the files' stats are trusted from now on
        snaps.take()
        for _ in range(SNAPSHOTS):
            t = time.perf_counter()
            snaps.release(snaps.take())
            unchanged.samples.append(_ms(t))
        for _ in range(RESTORES):
            backend.run(REWRITE_ALL, timeout=120)
            t = time.perf_counter()
            done = snaps.restore(first)
            restore.samples.append(_ms(t))
            assert len(done.modified) >= 1000, done.counts()
    finally:
        snaps.close()
    return [unchanged, restore, *_run_overhead(where, backend, settings)]


def _run_overhead(where: str, backend: Backend, settings: Settings) -> list[Metric]:
    time.sleep(2.5)  # the restores just wrote every file: past the racy window, their stats are trusted again
    found = []
    for enabled in (False, True):
        metric = Metric(f"print(1) run, checkpoints {'on' if enabled else 'off'} ({where})", "ms", None,
                        note="host mode, warm; the workspace: the 1,000-file tree")
        tuned = settings.with_overrides({"checkpoints.enabled": enabled})
        with Runtime(backend, settings=tuned, transcript=False) as runtime:
            runtime.execute("print(0)")
            for _ in range(RUNS):
                t = time.perf_counter()
                assert runtime.execute("print(1)").ok
                metric.samples.append(_ms(t))
        found.append(metric)
    off, on = found
    on.note += f"; adds {on.median - off.median:.1f} ms"
    return found


def _local(data: Path) -> list[Metric]:
    work = data / "work"
    work.mkdir()
    settings = Settings(data_dir=data / "herald")
    backend = LocalBackend(str(work), settings=settings)
    try:
        return _measure("local", backend, settings)
    finally:
        backend.close()


def _ssh(data: Path) -> list[Metric]:
    from herald.backends.ssh import SSHBackend
    from tests.fixtures.sshd import running_sshd

    try:
        with running_sshd() as server:
            workspace = server.make_workspace()
            try:
                settings = Settings(data_dir=data / "ssh").with_overrides(server.overrides())
                with SSHBackend(server.spec, cwd=workspace, settings=settings) as backend:
                    return _measure("SSH", backend, settings)
            finally:
                server.remove_workspace(workspace)
    except RuntimeError as exc:
        print(f"SSH checkpoint benchmarks skipped: {exc}")
        return []


def _docker(data: Path) -> list[Metric]:
    from herald.backends.docker import DockerBackend
    from tests.fixtures.dockerd import DockerUnavailable, build_test_image, docker_engine, docker_settings

    try:
        with docker_engine() as url:
            settings = docker_settings(Settings(data_dir=data / "docker"), url, build_test_image(url))
            with DockerBackend(settings=settings) as backend:
                return _measure("Docker", backend, settings)
    except DockerUnavailable as exc:
        print(f"Docker checkpoint benchmarks skipped: {exc}")
        return []


def run() -> list[Metric]:
    data = Path(tempfile.mkdtemp(prefix="herald-bench-checkpoints-"))
    try:
        return [*_local(data), *_ssh(data), *_docker(data)]
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    print_table("Workspace snapshots and checkpoints", run())
