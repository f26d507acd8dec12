"""MCP: one call of server-memory's search_nodes from a script, against the same call made
directly by the SDK's client (target: Herald adds at most 0.3 ms per call)."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from herald import Runtime, Settings
from herald.config import parse_mcp_servers

from .report import Metric

BATCHES, PER_BATCH = 10, 100
OVERHEAD_TARGET_MS = 0.3


def run() -> list[Metric]:
    try:
        import mcp  # noqa: F401

        from tests.mcp.servers import ensure
    except ImportError as exc:
        print(f"MCP benchmarks skipped: {exc}")
        return []
    installed = ensure()
    if "server-memory" not in installed.commands:
        print(f"MCP benchmarks skipped: server-memory is not installed: {installed.missing.get('server-memory')}")
        return []
    command = installed.commands["server-memory"]
    data = Path(tempfile.mkdtemp(prefix="herald-bench-mcp-"))
    try:
        direct = Metric("search_nodes, SDK client directly", "ms", None, note=f"{PER_BATCH} calls per sample, stdio")
        direct.samples = asyncio.run(_direct(command, data / "direct.jsonl"))
        herald = Metric("search_nodes from a script", "ms", None, note="hermes_tools stub -> RPC -> Dispatcher -> SDK")
        herald.samples = _from_script(command, data)
        baseline = statistics.median(direct.samples)
        overhead = Metric("Herald's overhead per MCP call", "ms", OVERHEAD_TARGET_MS,
                          note="script call minus the median direct call")
        overhead.samples = [s - baseline for s in herald.samples]
        return [direct, herald, overhead]
    finally:
        shutil.rmtree(data, ignore_errors=True)


async def _direct(command: list[str], memory: Path) -> list[float]:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command[0], args=command[1:], env={"MEMORY_FILE_PATH": str(memory)})
    samples = []
    with open(os.devnull, "w") as quiet:  # the server's banner on stderr
        async with Client(stdio_client(params, errlog=quiet), mode="legacy") as client:
            for _ in range(20):  # warm up
                await client.call_tool("search_nodes", {"query": "x"})
            for _ in range(BATCHES):
                t = time.perf_counter()
                for _ in range(PER_BATCH):
                    await client.call_tool("search_nodes", {"query": "x"})
                samples.append((time.perf_counter() - t) * 1000 / PER_BATCH)
    return samples


def _from_script(command: list[str], data: Path) -> list[float]:
    settings = Settings(data_dir=data / "herald")
    settings.mcp_servers = parse_mcp_servers(
        {"memory": {"command": command[0], "args": command[1:], "env": {"MEMORY_FILE_PATH": str(data / "h.jsonl")}}},
        "benchmark")
    with Runtime(settings=settings) as runtime:
        result = runtime.execute(f"""
import time
from hermes_tools import mcp_memory_search_nodes as search
for _ in range(20):
    search("x")
for _ in range({BATCHES}):
    t = time.perf_counter()
    for _ in range({PER_BATCH}):
        search("x")
    print((time.perf_counter() - t) * 1000 / {PER_BATCH})
""", max_tool_calls=1_000_000, timeout=600)
        if not result.ok:
            raise RuntimeError(f"benchmark script failed: {result.error}")
        return [float(line) for line in result.output.split()]
