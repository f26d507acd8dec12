"""Runtime core: script start, per-call latency of tools from a script, parallel calls, bulk edit."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.runtime.toolset import default_registry
from herald.tools.arguments import bind_arguments
from herald.tools.context import ToolContext
from herald.tools.registry import Registry, Tool

from .report import Metric
from .workloads import read_patch_verify

NO_LIMIT = 1_000_000


def _slow_tool(args: dict[str, Any], ctx: ToolContext) -> str:
    time.sleep(0.1)
    return "done"


def _registry() -> Registry:
    registry = Registry(default_registry())
    registry.register(
        Tool(
            name="wait_100ms",
            description="Sleep 100 ms (benchmark tool).",
            parameters={"type": "object", "properties": {}},
            handler=_slow_tool,
        )
    )
    return registry


def _in_script(runtime: Runtime, code: str) -> float:
    """Run `code`, which must print one float (seconds), and return it."""
    result = runtime.execute(code, max_tool_calls=NO_LIMIT, timeout=600)
    if not result.ok:
        raise RuntimeError(f"benchmark script failed: {result.error}")
    return float(result.output.strip().splitlines()[-1])


def _policy_cost(runtime: Runtime, calls: int = 20_000) -> Metric:
    """What the policy adds to one small read_file, on the path every call takes: the check of
    the default profile (workspace-write: the path resolved, symlinks followed, confined)."""
    metric = Metric(
        "policy check per read_file (small)", "ms", 0.010, note=f"workspace-write, {calls} checks per sample"
    )
    dispatcher = runtime.dispatcher
    tool = dispatcher.registry.get("read_file")
    assert tool is not None
    args = bind_arguments(tool, {"path": "small.txt"}, in_script=True)
    touches = tool.resources(args, dispatcher.ctx)  # the dispatcher has them anyway, for its locks
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(calls):
            if dispatcher.gate.check(tool, args, dispatcher.ctx, "script", touches) is not None:
                raise RuntimeError("benchmark read_file was refused by the policy")
        metric.samples.append((time.perf_counter() - t) * 1000 / calls)
    return metric


def _reads(calls: int) -> str:
    """A script that reads small.txt `calls` times and prints how long that took (seconds)."""
    return ("import time\nfrom hermes_tools import read_file\nt = time.perf_counter()\n"
            f"for _ in range({calls}): read_file('small.txt')\nprint(time.perf_counter() - t)")


def _read_via_herald(settings: Settings, work: Path, calls: int) -> Metric:
    """The same reads through the RPC and Herald's Dispatcher (the path of every other tool):
    what read_file costs where the script's process does not answer it itself."""
    metric = Metric("read_file (small) from a script, via Herald", "ms", None,
                    note="sandbox.backend_tools off: not answered in the script's process")
    via = settings.with_overrides({"sandbox.backend_tools": False})
    with LocalBackend(str(work), settings=via) as backend, Runtime(backend, settings=via) as runtime:
        for _ in range(7):
            metric.samples.append(1000 / calls * _in_script(runtime, _reads(calls)))
    return metric


def _terminal_true(calls: int) -> str:
    """A script that runs `terminal('true')` `calls` times and prints how long that took (seconds)."""
    return ("import time\nfrom hermes_tools import terminal\nt = time.perf_counter()\n"
            f"for _ in range({calls}): terminal('true')\nprint(time.perf_counter() - t)")


def _read_only_terminal(settings: Settings, work: Path, calls: int = 200) -> Metric:
    """terminal('true') under the read-only profile: each command runs in a fresh bwrap'ed bash
    (every path read-only, no network), the OS guarantee beside workspace-write's plain shell."""
    metric = Metric("terminal('true') from a script, read-only profile", "ms", None,
                    note=f"per call, {calls} calls per run; confined by bwrap + seccomp")
    with LocalBackend(str(work), settings=settings) as backend, Runtime(
        backend, settings=settings, policy="read-only"
    ) as runtime:
        for _ in range(5):
            metric.samples.append(1000 / calls * _in_script(runtime, _terminal_true(calls)))
    return metric


def _startup(
    settings: Settings, work: Path, *, transcript: bool, label: str,
    targets: tuple[float | None, float | None] = (None, None),
) -> list[Metric]:
    """print(1) end to end as a caller sees it: back-to-back, and after a pause (the warm child
    has had time to get ready). No wait_warm(): nothing is done for the benchmark's sake."""
    back = Metric(f"print(1) back-to-back, {label}", "ms", targets[0], note="execute() after execute()")
    pause = Metric(f"print(1) after a 50 ms pause, {label}", "ms", targets[1], note="the warm child is ready")
    with LocalBackend(str(work), settings=settings) as backend, Runtime(
        backend, settings=settings, transcript=transcript
    ) as runtime:
        for _ in range(200):
            t = time.perf_counter()
            runtime.execute("print(1)")
            back.samples.append((time.perf_counter() - t) * 1000)
        for _ in range(60):
            time.sleep(0.05)
            t = time.perf_counter()
            runtime.execute("print(1)")
            pause.samples.append((time.perf_counter() - t) * 1000)
    return [back, pause]


def _bulk_edit(runtime: Runtime, tree: Path) -> list[Metric]:
    """The 1,000-file read -> patch -> verify, plain and in a transaction, alternated on a fresh
    tree. The overhead is what the transaction's start and end took (timed in the script: its
    snapshot, its verify command, the changes' walk) over the rest of that run: the difference
    of two runs would measure the machine's noise (another process's load) as much."""
    bulk = Metric("read → patch → verify, 1,000 files", "s", 1.0, note="one script, 3,000 tool calls")
    in_tx = Metric("the same in a transaction(verify='true')", "s", None, note="snapshot, verify, commit")
    overhead = Metric("transaction's overhead on it", "%", 20.0, note="its start and end over the rest of the run")
    paths = json.dumps([f"bulk/mod_{i:04d}.py" for i in range(1000)])
    for _ in range(5):
        for verify in (None, "true"):
            shutil.rmtree(tree, ignore_errors=True)
            tree.mkdir()
            for i in range(1000):
                (tree / f"mod_{i:04d}.py").write_text(f"VALUE = {i}\n\ndef old_name():\n    return VALUE\n")
            script = read_patch_verify(paths, "def old_name():", "def new_name():", verify=verify)
            result = runtime.execute(script, max_tool_calls=NO_LIMIT, timeout=600)
            if not result.ok:
                raise RuntimeError(f"benchmark script failed: {result.error}")
            *own, total = (float(line) for line in result.output.split())
            (bulk if verify is None else in_tx).samples.append(total)
            if own:
                overhead.samples.append(own[0] / (total - own[0]) * 100)
    return [bulk, in_tx, overhead]


def run() -> list[Metric]:
    work = Path(tempfile.mkdtemp(prefix="herald-bench-"))
    settings = Settings(data_dir=work / "data")
    (work / "small.txt").write_text("".join(f"line {i}\n" for i in range(20)))
    # Isolation off first: with it on (the default) a run may cost at most 1.5 ms more after a pause.
    unisolated = settings.with_overrides({"sandbox.isolation": "none"})
    metrics = _startup(unisolated, work, transcript=True, label="isolation off", targets=(4.0, 2.5))
    off_pause = metrics[1].median
    metrics += _startup(settings, work, transcript=True, label="defaults (isolation on)",
                        targets=(5.0, round(off_pause + 1.5, 2)))
    metrics += _startup(settings, work, transcript=False, label="transcript off")
    spawned = settings.with_overrides({"sandbox.fork_server": False})
    metrics += _startup(spawned, work, transcript=True, label="fork server off")
    with LocalBackend(str(work), settings=settings) as backend, Runtime(
        backend, settings=settings, registry=_registry()
    ) as runtime:
        calls = 2000
        read = Metric("read_file (small) from a script", "ms", 0.08, note=f"per call, {calls} calls per run")
        term = Metric("terminal('true') from a script", "ms", 0.6, note="per call, 1000 calls per run")
        for _ in range(7):
            read.samples.append(1000 / calls * _in_script(runtime, _reads(calls)))
            term.samples.append(1000 / 1000 * _in_script(runtime, _terminal_true(1000)))
        par = Metric("16 parallel calls of a 100 ms tool", "s", 0.106, note="wall time inside one script")
        for _ in range(7):
            par.samples.append(_in_script(runtime, (
                "import time\nfrom hermes_tools import parallel, wait_100ms\nt = time.perf_counter()\n"
                "results = parallel([wait_100ms for _ in range(16)])\nassert results == ['done'] * 16\n"
                "print(time.perf_counter() - t)"
            )))
        metrics += [read, _read_via_herald(settings, work, calls), term, _read_only_terminal(settings, work), par,
                    _policy_cost(runtime)]

        metrics += _bulk_edit(runtime, work / "bulk")

    cold_settings = settings.with_overrides({"sandbox.warm": False, "sandbox.fork_server": False})
    with LocalBackend(str(work), settings=cold_settings) as backend, Runtime(
        backend, settings=cold_settings
    ) as runtime:
        cold = Metric("print(1), cold", "ms", None, note="fresh interpreter per run (warm start and fork server off)")
        for _ in range(40):
            t = time.perf_counter()
            runtime.execute("print(1)")
            cold.samples.append((time.perf_counter() - t) * 1000)
        metrics.append(cold)
    shutil.rmtree(work, ignore_errors=True)
    return metrics
