"""Scale: many Runtimes at once in one process, and one script making very many calls.

- 64 Runtimes, one per thread, each runs one script with one tool call: wall time from the
  first constructor to the last result, and the memory all of it holds once each Runtime has
  its next warm child (PSS of this process and every process below it: sandbox children, the
  fork server's zygote).
- 100,000 `read_file` calls in one script: this process's RSS before, halfway and after; flat
  means nothing per call is kept.
Default settings throughout (transcript on, no waiting for warm-up). It runs in a process of
its own (`python -m bench.scale_bench`): "this process" is then one that makes the Runtimes, not
one still holding what the benchmarks before it left behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from herald import Runtime, Settings
from herald._sandbox.procs.trees import descendants
from herald.backends.local import LocalBackend

from .report import Metric

RUNTIMES = 64
CALLS = 100_000


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _many_runtimes(settings: Settings, work: Path) -> tuple[float, float]:
    """(wall seconds, total PSS in MB while all are open). The memory is taken once every
    Runtime has its next warm child ready, as 64 idle Runtimes hold it, not while some are
    still on their way there (which would count fewer children)."""
    ready = threading.Barrier(RUNTIMES + 1)
    settled = threading.Barrier(RUNTIMES + 1)
    done = threading.Barrier(RUNTIMES + 1)
    errors: list[str] = []

    def one() -> None:
        try:
            with LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings) as runtime:
                result = runtime.execute(
                    "from hermes_tools import read_file\nprint(read_file('small.txt')['total_lines'])"
                )
                if not result.ok:
                    errors.append(result.error)
                ready.wait(120)  # all 64 are open and have run: the wall time ends here
                runtime.wait_warm()
                settled.wait(120)  # and each holds its next child: the memory is taken here
                done.wait(120)
        except Exception as exc:
            errors.append(repr(exc))
            for barrier in (ready, settled, done):
                barrier.abort()

    started = time.perf_counter()
    threads = [threading.Thread(target=one) for _ in range(RUNTIMES)]
    for thread in threads:
        thread.start()
    ready.wait(300)
    wall = time.perf_counter() - started
    settled.wait(120)
    pss = sum(_pss_kib(pid) for pid in [os.getpid(), *descendants(os.getpid())]) / 1024
    done.wait(120)
    for thread in threads:
        thread.join(60)
    if errors:
        raise RuntimeError(f"{len(errors)} of {RUNTIMES} runtimes failed: {errors[0]}")
    return wall, pss


def run() -> list[Metric]:
    """The metrics, measured in a new process."""
    proc = subprocess.run([sys.executable, "-m", "bench.scale_bench"], capture_output=True, text=True, timeout=1800,
                          cwd=Path(__file__).resolve().parent.parent)
    if proc.returncode != 0:
        raise RuntimeError(f"bench.scale_bench failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return [Metric(**fields) for fields in json.loads(proc.stdout.strip().splitlines()[-1])]


def measure() -> list[Metric]:
    work = Path(tempfile.mkdtemp(prefix="herald-bench-scale-"))
    settings = Settings(data_dir=work / "data")
    (work / "small.txt").write_text("".join(f"line {i}\n" for i in range(20)))
    wall = Metric(f"{RUNTIMES} Runtimes at once, one call each", "s", 1.2, note="threads in one process, wall time")
    memory = Metric(f"{RUNTIMES} Runtimes at once: total PSS", "MB", 200, note="this process + every child")
    for _ in range(3):
        seconds, pss = _many_runtimes(settings, work)
        wall.samples.append(seconds)
        memory.samples.append(pss)

    growth = Metric(f"parent RSS growth over {CALLS:,} calls in one script", "MB", 5,
                    note="second half of the calls (first half warms caches)")
    many = settings.with_overrides({"sandbox.max_tool_calls": CALLS + 10, "sandbox.timeout": 900})
    with LocalBackend(str(work), settings=many) as backend, Runtime(backend, settings=many) as runtime:
        marks: list[float] = []
        half = CALLS // 2
        code = (
            "from hermes_tools import read_file\n"
            f"for _ in range({half}): read_file('small.txt')\n"
            "print('half', flush=True)\n"
            f"for _ in range({CALLS - half}): read_file('small.txt')\n"
        )

        def on_output(stream: str, data: bytes) -> None:
            if b"half" in data:
                marks.append(_rss_mib())

        result = runtime.execute(code, on_output=on_output)
        if not result.ok or not marks:
            raise RuntimeError(f"the {CALLS:,}-call script failed: {result.error}")
        growth.samples.append(max(0.0, _rss_mib() - marks[0]))
        growth.note += f"; RSS at half {marks[0]:.0f} MB"
    return [wall, memory, growth]


if __name__ == "__main__":
    print(json.dumps([dataclasses.asdict(metric) for metric in measure()]))
