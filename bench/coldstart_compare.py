"""A cold `herald exec --exec-mode backend` print(1), end to end, for two Herald checkouts
interleaved run by run (so that the machine's load falls on both alike), with the backend's
cache (_sandbox/supervisor/sandboxcache.py: the isolation probe's answer) emptied before every run ("cache
cold": a backend that has not probed within the hour) and kept ("cache warm": every later session).

    python -m bench.coldstart_compare --before /work/main --after . [--rtt 0.010] [--runs 10] [--in-process]

Starts the test sshd behind the latency proxy as bench/coldstart_timeline.py does; prints the
median and min-max of each series and the load average before and after. With --in-process,
what the CLI does past its own start-up instead (a new Runtime with the CLI's settings, print(1),
close), in one process per checkout over one SSH connection each: without the CLI's imports and
handshake, whose time on a loaded machine varies more than the setup's. With --local, the same on
the local backend, with the CPU time of the backend's processes (children there) per run.
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


def _series_line(name: str, samples: list[float]) -> str:
    return (f"{name:<34} median {statistics.median(samples):7.0f} ms   min {min(samples):6.0f}   "
            f"max {max(samples):6.0f}   (n={len(samples)})")


# One process per checkout: a line in, one cold Runtime + print(1) + close, its milliseconds out.
# On the local backend (spec "local") the backend's processes are this one's children: their CPU
# time follows the milliseconds (wall, then CPU), a measure the machine's load hardly moves.
IN_PROCESS = r"""
import resource, sys, time
from herald import Runtime, Settings
spec, workspace, overrides = sys.argv[1], sys.argv[2], eval(sys.argv[3])
settings = Settings().with_overrides(dict(overrides, **{"sandbox.warm": False, "sandbox.fork_server": False}))
if spec == "local":
    from herald.backends.local import LocalBackend
    backend = LocalBackend(workspace, settings=settings)
else:
    from herald.backends.ssh import SSHBackend
    backend = SSHBackend(spec, cwd=workspace, settings=settings)
def children_cpu():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (used.ru_utime + used.ru_stime) * 1000
for line in sys.stdin:
    started, cpu = time.perf_counter(), children_cpu()
    with Runtime(backend, settings=settings, exec_mode="backend") as runtime:
        assert runtime.execute("print(1)").output == "1\n"
    print((time.perf_counter() - started) * 1000, children_cpu() - cpu, flush=True)
backend.close()
"""


def run(before: str, after: str, rtt: float, runs: int, in_process: bool = False, local: bool = False) -> None:
    from bench.exec_mode_bench import cli_environment
    from tests.fixtures.latency_proxy import proxy_process
    from tests.fixtures.sshd import running_sshd

    with running_sshd() as server, proxy_process((server.host, server.port), rtt) as port:
        workspace = server.make_workspace()
        spec, overrides = server.through(port) if rtt > 0 else (server.spec, server.overrides())
        home, env = cli_environment("herald-bench-compare-", overrides)
        argv = [sys.executable, "-m", "herald", "exec", "-", "--backend", spec, "--cwd", workspace,
                "--exec-mode", "backend"]
        cache = subprocess.run(["su", "-s", "/bin/sh", "-c", 'printf %s "${TMPDIR:-/tmp}/herald-cache-$(id -u)"',
                                server.user], capture_output=True, text=True, check=True).stdout

        where = ("local", tempfile.mkdtemp(prefix="herald-bench-compare-work-")) if local else (spec, workspace)
        children = {tree: subprocess.Popen([sys.executable, "-c", IN_PROCESS, *where, repr(overrides)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree,
                                           env=dict(env, PYTHONPATH=tree))
                    for tree in ((before, after) if in_process or local else ())}
        cpu: dict[str, list[float]] = {}

        def once(tree: str, empty_cache: bool) -> float:
            if empty_cache:
                shutil.rmtree(cache if not local else f"/tmp/herald-cache-{os.getuid()}", ignore_errors=True)
            child = children.get(tree)
            if child is not None:
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write("run\n")
                child.stdin.flush()
                wall, used = map(float, child.stdout.readline().split())
                if local:  # (over SSH the backend's processes are not ours)
                    cpu.setdefault(f"{tree}, cache {'cold' if empty_cache else 'warm'}", []).append(used)
                return wall
            started = time.perf_counter()
            proc = subprocess.run(argv, input="print(1)\n", env=dict(env, PYTHONPATH=tree), cwd=tree,
                                  capture_output=True, text=True, timeout=120)  # (-m: the cwd comes first)
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
            for child in children.values():
                child.communicate(timeout=60)
            server.remove_workspace(workspace)
            shutil.rmtree(home, ignore_errors=True)
        what = (
            "new Runtime + print(1) + close (herald exec's settings)" if in_process or local else "herald exec print(1)"
        )
        print(f"{what}, {'local backend' if local else f'RTT {rtt * 1000:.0f} ms'}; before = {before}, after = {after}")
        for name, samples in series.items():
            print(_series_line(name, samples))
        for name, samples in cpu.items():
            print(_series_line(f"CPU of the backend's processes: {name}", samples))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the Herald checkout to compare against (e.g. main)")
    parser.add_argument("--after", default=os.getcwd(), help="the Herald checkout measured (default: here)")
    parser.add_argument("--rtt", type=float, default=0.010)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--in-process", action="store_true", help="without the CLI's start-up (see above)")
    parser.add_argument("--local", action="store_true", help="--in-process on the local backend, with CPU times")
    options = parser.parse_args()
    run(os.path.abspath(options.before), os.path.abspath(options.after), options.rtt, options.runs, options.in_process,
        options.local)
