"""SSH backend: command round trip on an open session, file calls over SFTP, a tool call from a
script (host mode), and connecting. Uses the real sshd of tests/fixtures/sshd.py on 127.0.0.1.

Then host mode at 0 and 10 ms round-trip time (the 10 ms through tests/fixtures/latency_proxy.py,
which delays each direction by 5 ms): terminal('true') from a script, and read -> patch -> verify
over 200 files in one script. `python -m bench.ssh_bench` prints this table alone.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from herald import Runtime, Settings
from herald.backends.ssh import SSHBackend

if TYPE_CHECKING:
    from tests.fixtures.sshd import SSHServer

from .report import Metric, print_table
from .workloads import read_patch_verify

NO_LIMIT = 1_000_000


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def run() -> list[Metric]:
    from tests.fixtures.sshd import running_sshd

    data = Path(tempfile.mkdtemp(prefix="herald-bench-ssh-"))
    try:
        with running_sshd() as server:
            workspace = server.make_workspace()
            try:
                settings = Settings(data_dir=data).with_overrides(server.overrides())
                metrics = _measure(server.spec, workspace, settings)
                for rtt in (0.0, 0.010):
                    metrics += _measure_rtt(server, workspace, data, rtt)
                return metrics
            finally:
                server.remove_workspace(workspace)
    except RuntimeError as exc:
        print(f"SSH benchmarks skipped: {exc}")
        return []
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _measure(spec: str, workspace: str, settings: Settings) -> list[Metric]:
    connect = Metric(
        "connect + first command", "ms", None, note="TCP, handshake, auth, session setup, shell start, `true`"
    )
    for _ in range(5):
        t = time.perf_counter()
        with SSHBackend(spec, cwd=workspace, settings=settings) as backend:
            backend.run("true")
            connect.samples.append(_ms(t))

    round_trip = Metric("command round trip, open session", "ms", 3.0, note="backend.run('true'), 1000 calls")
    read = Metric(
        "read_bytes (small file)",
        "ms",
        None,
        note="SFTP open + fstat + read pipelined, close not awaited: 1 round trip, 300 calls",
    )
    write = Metric(
        "write_bytes (small file, atomic)", "ms", None, note="SFTP temp file + posix-rename: 2 round trips, 300 calls"
    )
    stat = Metric("stat (a path not seen before)", "ms", None, note="one SFTP round trip, 300 calls")
    script = Metric("terminal('true') from a script (host mode)", "ms", None, note="per call, 500 calls per run")
    with SSHBackend(spec, cwd=workspace, settings=settings) as backend:
        backend.run("true")
        backend.write_bytes("small.txt", "".join(f"line {i}\n" for i in range(20)).encode())
        for _ in range(1000):
            t = time.perf_counter()
            backend.run("true")
            round_trip.samples.append(_ms(t))
        for metric, call in (
            (read, lambda: backend.read_bytes("small.txt")),
            (write, lambda: backend.write_bytes("written.txt", b"x" * 1000)),
            (stat, lambda: backend.stat(f"missing-{time.perf_counter_ns()}")),  # not answered from what it saw
        ):
            for _ in range(300):
                t = time.perf_counter()
                call()
                metric.samples.append(_ms(t))
        with Runtime(backend, settings=settings) as runtime:
            for _ in range(5):
                result = runtime.execute(
                    "import time\nfrom hermes_tools import terminal\nt = time.perf_counter()\n"
                    "for _ in range(500): terminal('true')\nprint(time.perf_counter() - t)",
                    max_tool_calls=NO_LIMIT,
                    timeout=600,
                )
                if not result.ok:
                    raise RuntimeError(f"benchmark script failed: {result.error}")
                script.samples.append(float(result.output.strip()) * 1000 / 500)
    return [round_trip, script, read, write, stat, connect]


FILES = 200
BULK = read_patch_verify(f"[f'bulk/mod_{{i:04d}}.py' for i in range({FILES})]", "def old_name():", "def new_name():")


def _measure_rtt(server: SSHServer, workspace: str, data: Path, rtt: float) -> list[Metric]:
    """Host mode with `rtt` between Herald and sshd (0: straight to sshd, else through the proxy)."""
    from tests.fixtures.latency_proxy import proxy_process

    label = f"{rtt * 1000:.0f} ms RTT"
    term = Metric(f"terminal('true') from a script, {label}", "ms", 12.0 if rtt else None,
                  note="host mode, per call, 200 calls per run")
    bulk = Metric(f"read → patch → verify, {FILES} files, {label}", "s", 15.0 if rtt else None,
                  note="host mode, one script, 600 tool calls")
    par = Metric(
        f"parallel() of 32 read_file, {label}",
        "ms",
        None,
        note=f"host mode, wall time; one after another: 32 × 2 round trips ({64 * rtt * 1000:.0f} ms of waiting)",
    )
    with proxy_process((server.host, server.port), rtt) as port:
        spec, overrides = server.through(port) if rtt else (server.spec, server.overrides())
        settings = Settings(data_dir=data).with_overrides(overrides)
        tree = Path(workspace, "bulk")
        with SSHBackend(spec, cwd=workspace, settings=settings) as backend, Runtime(
            backend, settings=settings
        ) as runtime:
            for _ in range(3):
                result = runtime.execute(
                    "import time\nfrom hermes_tools import terminal\nterminal('true')\nt = time.perf_counter()\n"
                    "for _ in range(200): terminal('true')\nprint(time.perf_counter() - t)",
                    max_tool_calls=NO_LIMIT, timeout=600,
                )
                if not result.ok:
                    raise RuntimeError(f"benchmark script failed: {result.error}")
                term.samples.append(float(result.output.strip()) * 1000 / 200)
            for _ in range(3):
                shutil.rmtree(tree, ignore_errors=True)
                tree.mkdir()  # the host is this machine: the files are made here
                for i in range(FILES):
                    (tree / f"mod_{i:04d}.py").write_text(f"VALUE = {i}\n\ndef old_name():\n    return VALUE\n")
                shutil.chown(tree, server.user)
                for child in tree.iterdir():
                    shutil.chown(child, server.user)
                result = runtime.execute(BULK, max_tool_calls=NO_LIMIT, timeout=600)
                if not result.ok:
                    raise RuntimeError(f"benchmark script failed: {result.error}")
                bulk.samples.append(float(result.output.strip()))
            for _ in range(3):
                result = runtime.execute(
                    "import time\nfrom hermes_tools import parallel, read_file, terminal\nterminal('true')\n"
                    "t = time.perf_counter()\n"
                    "pages = parallel([(read_file, f'bulk/mod_{i:04d}.py') for i in range(32)])\n"
                    "assert all('content' in p for p in pages), pages[:2]\nprint(time.perf_counter() - t)",
                    max_tool_calls=NO_LIMIT, timeout=600,
                )
                if not result.ok:
                    raise RuntimeError(f"benchmark script failed: {result.error}")
                par.samples.append(float(result.output.strip()) * 1000)
    return [term, bulk, par]


if __name__ == "__main__":
    print_table("SSH backend", run())
