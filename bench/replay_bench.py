"""Record and replay: a 1,000-call run recorded, replayed, and what recording costs.

The run: a script making 1,000 `read_file` calls over 20 small files, on the local backend in
host mode. Recording sends every call to Herald (`sandbox.backend_tools` off), so its overhead is
measured against the same run with the shortcut off, and the shortcut's default beside it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.runtime.calls import CallOutcome, ToolCall
from herald.runtime.replay import RECORDING_SETTINGS, Player, Recorder, read_recording
from herald.runtime.replay.format import header

from .report import Metric

CALLS = 1_000
FILES = 20
SAMPLES = 7
SCRIPT = (
    "from hermes_tools import read_file\n"
    f"for i in range({CALLS}):\n"
    f"    read_file(f'f{{i % {FILES}}}.txt')\n"
    "print('done')\n"
)


def _execute(runtime: Runtime) -> float:
    started = time.perf_counter()
    result = runtime.execute(SCRIPT, max_tool_calls=CALLS, timeout=600)
    seconds = time.perf_counter() - started
    if not result.ok or result.tool_calls_made != CALLS:
        raise RuntimeError(f"benchmark run failed: {result.status} {result.error[-500:]}")
    return seconds


def _plain(settings: Settings, work: Path, metric: Metric) -> None:
    with LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings) as runtime:
        _execute(runtime)  # the first run starts the sandbox: not measured
        for _ in range(SAMPLES):
            metric.samples.append(_execute(runtime))


def _record(settings: Settings, work: Path, recording: Path, metric: Metric, overhead: Metric, off: Metric) -> None:
    """Runs with and without a recorder on one Runtime, alternated, so each pair sees the same machine."""
    via = settings.with_overrides(RECORDING_SETTINGS)
    with LocalBackend(str(work), settings=via) as backend, Runtime(backend, settings=via) as runtime:
        _execute(runtime)
        for _ in range(SAMPLES):
            without = _execute(runtime)
            recorder = Recorder(recording)
            recorder.start(header(SCRIPT, backend="local", exec_mode="host", max_tool_calls=CALLS,
                                  tools=[t.name for t in runtime.dispatcher.script_tools]))
            runtime.dispatcher.tap = recorder
            started = time.perf_counter()
            _execute(runtime)
            problem = recorder.close({"status": "success"})  # flushed at the run's end: counted
            recorded = time.perf_counter() - started
            runtime.dispatcher.tap = None
            if problem is not None:
                raise RuntimeError(problem)
            off.samples.append(without)
            metric.samples.append(recorded)
            overhead.samples.append((recorded - without) * 1e6 / CALLS / 1000)  # ms per call


def _replay(settings: Settings, work: Path, recording: Path, metric: Metric, per_call: Metric) -> None:
    replay = settings.with_overrides({**RECORDING_SETTINGS, "sandbox.warm_tools": "off"})
    with LocalBackend(str(work), settings=replay) as backend, Runtime(backend, settings=replay) as runtime:
        _execute(runtime)
        for _ in range(SAMPLES):
            started = time.perf_counter()
            player = Player(read_recording(recording), SCRIPT)
            runtime.dispatcher.tap = player
            _execute(runtime)
            seconds = time.perf_counter() - started
            if player.mismatch is not None or player.unused():
                raise RuntimeError(f"the replay did not match: {player.mismatch}")
            metric.samples.append(seconds)
            per_call.samples.append(seconds * 1000 / CALLS)
        runtime.dispatcher.tap = None


def _recorder_cost(root: Path, metric: Metric, calls: int = 20_000) -> None:
    """What recording adds to one call, in-process: `seen` on the call's path plus the writer
    thread's encoding and writing of a read_file result like the run's, flushed at the end."""
    outcome: CallOutcome = {"result": {"path": "f1.txt", "content": "".join(
        f"{n + 1:>6}|line {n} of file 1\n" for n in range(20)), "total_lines": 20, "start_line": 1, "end_line": 20}}
    call = ToolCall("script", "read_file", {"path": "f1.txt", "offset": 1, "limit": 500}, "run-1")
    for _ in range(SAMPLES):
        recorder = Recorder(root / "cost.jsonl")
        started = time.perf_counter()
        for _ in range(calls):
            recorder.seen(call, outcome)
        recorder.close({})
        metric.samples.append((time.perf_counter() - started) * 1000 / calls)


def _cli_replay(work: Path, home: Path, recording: Path, metric: Metric) -> None:
    """`herald exec --replay` end to end, as a person runs it: start-up and sandbox included."""
    (work / "s.py").write_text(SCRIPT)
    env = {"HERALD_DATA_DIR": str(home / "data"), "HERALD_CONFIG": str(home / "none.toml"), "PATH": "/usr/bin:/bin"}
    for _ in range(5):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "herald", "exec", "s.py", "--replay", str(recording), "--strict"],
                              cwd=work, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"herald exec --replay failed: {done.stderr[-500:]}")
        metric.samples.append(time.perf_counter() - started)


def run() -> list[Metric]:
    off = Metric(f"{CALLS:,}-call run, recording off", "s", None, note="every read_file to Herald (as recording does)")
    default = Metric(f"{CALLS:,}-call run, defaults", "s", None, note="read_file answered in the script's process")
    on = Metric(f"{CALLS:,}-call run, recording on", "s", None, note="incl. the recording's flush at the end")
    overhead = Metric("recording's overhead per call", "ms", None, note="on minus off, paired runs, / 1,000")
    replayed = Metric(f"replay of the {CALLS:,}-call run", "s", None, note="recording read + run, no tool runs")
    per_call = Metric("replay per call", "ms", None, note="the replay's wall time / 1,000")
    cost = Metric("recorder's work per call", "ms", None, note="seen + encode + write, in-process, CPU of both threads")
    cli = Metric(f"herald exec --replay, {CALLS:,} calls", "s", None, note="the whole command, start-up included")
    with tempfile.TemporaryDirectory(prefix="herald-replay-bench-") as tmp:
        root = Path(tmp)
        work, home = root / "work", root / "home"
        work.mkdir()
        home.mkdir()
        for i in range(FILES):
            (work / f"f{i}.txt").write_text("".join(f"line {n} of file {i}\n" for n in range(20)))
        settings = Settings(data_dir=home / "data")
        recording = root / "run.jsonl"
        _plain(settings, work, default)
        _record(settings, work, recording, on, overhead, off)
        _replay(settings, work, recording, replayed, per_call)
        _cli_replay(work, home, recording, cli)
        _recorder_cost(root, cost)
        size = recording.stat().st_size
    on.note += f"; {size / 1e6:.2f} MB recording"
    return [default, off, on, overhead, cost, replayed, per_call, cli]


if __name__ == "__main__":
    from .report import print_table

    print_table("Record and replay", run())
