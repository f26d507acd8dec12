"""A cold `herald exec --exec-mode backend` print(1), end to end, for two Herald checkouts
interleaved run by run (so that the machine's load falls on both alike), with the backend's
sandbox cache (_sandbox/sandboxcache.py) emptied before every run ("cache cold": a backend that
has never seen this version) and kept ("cache warm": every later session).

    python -m bench.coldstart_compare --before /work/main --after . [--rtt 0.010] [--runs 10]

Starts the test sshd behind the latency proxy as bench/coldstart_timeline.py does; prints the
median and min-max of each series and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _series_line(name: str, samples: list[float]) -> str:
    return (f"{name:<34} median {statistics.median(samples):7.0f} ms   min {min(samples):6.0f}   "
            f"max {max(samples):6.0f}   (n={len(samples)})")


def run(before: str, after: str, rtt: float, runs: int) -> None:
    from tests.fixtures.latency_proxy import proxy_process
    from tests.fixtures.sshd import running_sshd

    with running_sshd() as server, proxy_process((server.host, server.port), rtt) as port:
        workspace = server.make_workspace()
        spec, overrides = server.through(port) if rtt > 0 else (server.spec, server.overrides())
        home = Path(tempfile.mkdtemp(prefix="herald-bench-compare-"))
        env = dict(os.environ, HERALD_DATA_DIR=str(home / "data"), HERALD_CONFIG=str(home / "none.toml"))
        env.update({"HERALD_" + key.replace(".", "_").upper(): str(value) for key, value in overrides.items()})
        argv = [sys.executable, "-m", "herald", "exec", "-", "--backend", spec, "--cwd", workspace,
                "--exec-mode", "backend"]
        cache = subprocess.run(["su", "-s", "/bin/sh", "-c", 'printf %s "${TMPDIR:-/tmp}/herald-cache-$(id -u)"',
                                server.user], capture_output=True, text=True, check=True).stdout

        def once(tree: str, empty_cache: bool) -> float:
            if empty_cache:
                shutil.rmtree(cache, ignore_errors=True)
            started = time.perf_counter()
            proc = subprocess.run(argv, input="print(1)\n", env=dict(env, PYTHONPATH=tree), capture_output=True,
                                  text=True, timeout=120)
            elapsed = (time.perf_counter() - started) * 1000
            if proc.returncode != 0 or proc.stdout != "1\n":
                raise RuntimeError(f"herald exec failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
            return elapsed

        series: dict[str, list[float]] = {"before": [], "after, cache cold": [], "after, cache warm": []}
        try:
            once(before, False)  # the bytecode caches of both checkouts written, not counted
            once(after, False)
            print(f"load average before: {os.getloadavg()}")
            for _ in range(runs):
                series["before"].append(once(before, True))
                series["after, cache cold"].append(once(after, True))
                series["after, cache warm"].append(once(after, False))
            print(f"load average after:  {os.getloadavg()}")
        finally:
            server.remove_workspace(workspace)
            shutil.rmtree(home, ignore_errors=True)
        print(f"herald exec --exec-mode backend print(1), RTT {rtt * 1000:.0f} ms; before = {before}, after = {after}")
        for name, samples in series.items():
            print(_series_line(name, samples))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the Herald checkout to compare against (e.g. main)")
    parser.add_argument("--after", default=os.getcwd(), help="the Herald checkout measured (default: here)")
    parser.add_argument("--rtt", type=float, default=0.010)
    parser.add_argument("--runs", type=int, default=10)
    options = parser.parse_args()
    run(os.path.abspath(options.before), os.path.abspath(options.after), options.rtt, options.runs)
