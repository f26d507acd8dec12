"""`herald mcp serve --http` under load: 64 clients (the SDK's own, one connection each) x 10
`execute_code` calls, with bearer tokens (one token per client) and without authentication.

Goal (issue #32): authentication costs at most 5 % of the throughput, and the server answers at
least 150 calls/s. Runs are serialised on the server's one Runtime, so the throughput is bounded
by how fast that Runtime starts and finishes one script after another (its warm children, the
fork server); the rows say what the server path adds on top of that.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from .report import Metric

CLIENTS, CALLS, ROUNDS = 64, 10, 3
CODE = "print(sum(range(100)))"
NO_LIMITS = ("-c", "serve.max_concurrent_runs=0", "-c", "serve.max_runs_per_minute=0")


def run() -> list[Metric]:
    try:
        import anyio

        from tests.mcp.httpserve import http_herald, token_file
    except ImportError as exc:
        print(f"MCP serve benchmarks skipped: {exc}")
        return []
    root = Path(tempfile.mkdtemp(prefix="herald-bench-serve-"))
    try:
        workspace = root / "ws"
        workspace.mkdir()
        names = {f"client{i:02d}": secrets.token_urlsafe(24) for i in range(CLIENTS)}
        tokens = token_file(root / "tokens", **names)
        variants: list[tuple[str, tuple[str, ...], list[str | None]]] = [
            ("no auth", ("--no-auth", *NO_LIMITS), [None] * CLIENTS),
            ("bearer tokens", ("--token-file", str(tokens), *NO_LIMITS), [*names.values()]),
            ("bearer tokens + default limits", ("--token-file", str(tokens)), [*names.values()]),
        ]
        with contextlib.ExitStack() as servers:
            started = [(label, servers.enter_context(http_herald(workspace, root / label.replace(" ", "-"), *flags)),
                        client_tokens) for label, flags, client_tokens in variants]
            for _, served, client_tokens in started:
                anyio.run(_load, served.url, client_tokens[:4], 2)  # warm: the Runtime's children, the SDK
            rounds: dict[str, list[tuple[list[float], int, float, float]]] = {label: [] for label, *_ in variants}
            for _ in range(ROUNDS):  # the variants in turn, so a busy moment of the machine hits them alike
                for label, served, client_tokens in started:
                    before = _cpu_seconds(served.proc.pid)
                    latencies, errors, seconds = anyio.run(_load, served.url, client_tokens, CALLS)
                    cpu = (_cpu_seconds(served.proc.pid) - before) * 1000 / max(len(latencies), 1)
                    rounds[label].append((latencies, errors, seconds, cpu))
        metrics: list[Metric] = []
        for label, samples in rounds.items():
            errors = sum(r[1] for r in samples)
            note = f"{ROUNDS} rounds of {CLIENTS}x{CALLS} calls, {errors} error(s)"
            metrics += [
                Metric(f"{label}: throughput", "calls/s", None, [len(r[0]) / r[2] for r in samples],
                       "goal: >= 150 calls/s"),
                Metric(f"{label}: p50 latency", "ms", None, [statistics.median(r[0]) for r in samples], note),
                Metric(f"{label}: p95 latency", "ms", None, [_p95(r[0]) for r in samples], note),
                Metric(f"{label}: errors", "calls", 0, [float(r[1]) for r in samples]),
                Metric(f"{label}: server CPU per call", "ms", None, [r[3] for r in samples],
                       "the serving process (HTTP, MCP, Herald), not the scripts"),
            ]
        paired = list(zip(rounds["no auth"], rounds["bearer tokens"], strict=True))
        metrics.append(Metric("authentication's cost in throughput", "%", 5.0,
                              [(1 - (len(a[0]) / a[2]) / (len(o[0]) / o[2])) * 100 for o, a in paired],
                              "bearer tokens vs no auth, both without limits, round by round"))
        metrics.append(Metric("authentication's cost in server CPU", "%", 5.0,
                              [(a[3] / o[3] - 1) * 100 for o, a in paired], "the same rounds"))
        metrics.append(Metric("the same script on one Runtime, in-process", "calls/s", None,
                              _runtime_alone(workspace), "serial runs: the ceiling the serialised runs set"))
        return metrics
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _runtime_alone(workspace: Path) -> list[float]:
    from herald import Runtime
    from herald.backends.local import LocalBackend

    samples = []
    with LocalBackend(str(workspace)) as backend, Runtime(backend, transcript=False) as runtime:
        for _ in range(20):
            runtime.execute(CODE)
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(CLIENTS * CALLS // 4):
                runtime.execute(CODE)
            samples.append(CLIENTS * CALLS // 4 / (time.perf_counter() - started))
    return samples


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (its threads; not its children)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def _load(url: str, tokens: list[str | None], calls: int) -> tuple[list[float], int, float]:
    """Each token's client makes `calls` calls one after another, all clients at once: the
    latencies (ms) of the calls that succeeded, the number that failed, the wall time (s)."""
    import anyio

    from tests.mcp.httpserve import client

    latencies: list[float] = []
    errors = 0

    async def one(token: str | None) -> None:
        nonlocal errors
        made = 0
        try:
            async with client(url, token) as herald:
                while made < calls:
                    made += 1
                    started = time.perf_counter()
                    result = await herald.call_tool("execute_code", {"code": CODE})
                    if result.is_error or (result.structured_content or {}).get("output", "").strip() != "4950":
                        errors += 1
                    else:
                        latencies.append((time.perf_counter() - started) * 1000)
        except Exception:  # the connection failed: this call and those not made count as errors
            errors += calls - max(made - 1, 0)

    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for token in tokens:
            tasks.start_soon(one, token)
    return latencies, errors, time.perf_counter() - started
