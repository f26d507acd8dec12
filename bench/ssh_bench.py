"""SSH backend: command round trip on an open session, file calls over SFTP, a tool call from a
script (host mode), and connecting. Uses the real sshd of tests/fixtures/sshd.py on 127.0.0.1.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from herald import Runtime, Settings
from herald.backends.ssh import SSHBackend

from .report import Metric

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
                return _measure(server.spec, workspace, settings)
            finally:
                server.remove_workspace(workspace)
    except RuntimeError as exc:
        print(f"SSH benchmarks skipped: {exc}")
        return []
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _measure(spec: str, workspace: str, settings: Settings) -> list[Metric]:
    connect = Metric("connect + first command", "ms", None, note="TCP, handshake, auth, session setup, shell start, `true`")
    for _ in range(5):
        t = time.perf_counter()
        with SSHBackend(spec, cwd=workspace, settings=settings) as backend:
            backend.run("true")
            connect.samples.append(_ms(t))

    round_trip = Metric("command round trip, open session", "ms", 3.0, note="backend.run('true'), 1000 calls")
    read = Metric("read_bytes (small file)", "ms", None, note="SFTP open + fstat + read + close, 300 calls")
    write = Metric("write_bytes (small file, atomic)", "ms", None, note="SFTP temp file + posix-rename, 300 calls")
    stat = Metric("stat (small file)", "ms", None, note="one SFTP round trip, 300 calls")
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
            (stat, lambda: backend.stat("small.txt")),
        ):
            for _ in range(300):
                t = time.perf_counter()
                call()
                metric.samples.append(_ms(t))
        with Runtime(backend, settings=settings, transcript=False) as runtime:
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
