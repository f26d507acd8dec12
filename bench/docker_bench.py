"""Docker backend: command round trip on an open session, file calls, container start and removal,
and read_file from a script with and without the workspace check (which resolves the path in
the container: one more command in the file shell per call).

Uses the engine and test image of tests/fixtures/dockerd.py (a dockerd is started when none runs).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from herald import Runtime, Settings
from herald.backends.docker import DockerBackend

from .report import Metric


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def run() -> list[Metric]:
    from tests.fixtures.dockerd import (
        DockerUnavailable,
        build_test_image,
        docker_engine,
        docker_settings,
    )

    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="herald-bench-docker-")))
    try:
        with docker_engine() as url:
            tuned = docker_settings(settings, url, build_test_image(url))
            return _measure(tuned)
    except DockerUnavailable as exc:
        print(f"Docker benchmarks skipped: {exc}")
        return []


def _measure(settings: Settings) -> list[Metric]:
    start = Metric("container start + first command", "ms", None, note="create, start, exec bash, run `true`")
    remove = Metric("close (container removed)", "ms", None)
    for _ in range(5):
        backend = DockerBackend(settings=settings)
        t = time.perf_counter()
        backend.run("true")
        start.samples.append(_ms(t))
        t = time.perf_counter()
        backend.close()
        remove.samples.append(_ms(t))

    round_trip = Metric("command round trip, open session", "ms", 5.0, note="backend.run('true'), 500 per run")
    read = Metric("read_bytes (small file)", "ms", None, note="through the file shell, 200 per run")
    write = Metric("write_bytes (small file, atomic)", "ms", None, note="temp file + rename, 200 per run")
    realpath = Metric(
        "realpath (the workspace check's resolution)", "ms", None, note="readlink -f in the file shell, 200 per run"
    )
    checked = {
        profile: Metric(f"read_file from a script, profile {profile}", "ms", None, note=note)
        for profile, note in (
            ("workspace-write", "path resolved in the container, then stat + read; per call, 200 per run"),
            ("full", "no workspace check: stat + read; per call, 200 per run"),
        )
    }
    with DockerBackend(settings=settings) as backend:
        backend.run("true")
        backend.write_bytes("small.txt", b"x" * 1000)
        for _ in range(500):
            t = time.perf_counter()
            backend.run("true")
            round_trip.samples.append(_ms(t))
        for _ in range(200):
            t = time.perf_counter()
            backend.read_bytes("small.txt")
            read.samples.append(_ms(t))
        for _ in range(200):
            t = time.perf_counter()
            backend.write_bytes("small.txt", b"y" * 1000)
            write.samples.append(_ms(t))
        for _ in range(200):
            t = time.perf_counter()
            backend.realpath("small.txt")
            realpath.samples.append(_ms(t))
        for profile, metric in checked.items():
            with Runtime(backend, settings=settings, policy=profile) as runtime:
                for _ in range(3):
                    result = runtime.execute(
                        "import time\nfrom hermes_tools import read_file\nread_file('small.txt')\n"
                        "t = time.perf_counter()\nfor _ in range(200): read_file('small.txt')\n"
                        "print(time.perf_counter() - t)", max_tool_calls=1000, timeout=600)
                    if not result.ok:
                        raise RuntimeError(f"benchmark script failed: {result.error}")
                    metric.samples.append(float(result.output.strip()) * 1000 / 200)
    return [round_trip, read, write, realpath, *checked.values(), start, remove]


if __name__ == "__main__":
    from .report import print_table

    print_table("Docker backend", run())
