"""`Runtime.execute(on_output=...)`: the script's output reaches a listener while it runs, in
order, from one-shot runs and kernel cells, on the host and inside the backend; the result's caps
are unchanged. Ordering is forced with a file the script waits for, never with sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from herald import Runtime

WAIT_FOR_GO = "import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.01)\n"


class Listener:
    def __init__(self, workspace: Path, trigger: bytes) -> None:
        self.chunks: list[tuple[str, bytes]] = []
        self._workspace = workspace
        self._trigger = trigger

    def __call__(self, stream: str, data: bytes) -> None:
        self.chunks.append((stream, data))
        if self._trigger in data:  # the script is blocked until the listener has seen this
            (self._workspace / "go").touch()

    def text(self, stream: str) -> str:
        return b"".join(d for s, d in self.chunks if s == stream).decode()


@pytest.mark.parametrize("exec_mode", ["host", "backend"])
def test_listener_sees_output_before_the_script_ends(make_runtime: Callable[..., Runtime], workspace: Path,
                                                     exec_mode: str) -> None:
    runtime = make_runtime(exec_mode=exec_mode)
    listener = Listener(workspace, b"waiting")
    code = "import sys\nprint('waiting')\nprint('to err', file=sys.stderr)\n" + WAIT_FOR_GO + "print('done')\n"
    result = {}

    def run() -> None:
        result["r"] = runtime.execute(code, on_output=listener, timeout=60)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(90)
    assert not worker.is_alive()
    r = result["r"]
    assert r.status == "success", r.error  # it could only finish because the listener saw 'waiting'
    assert listener.text("stdout") == "waiting\ndone\n" == r.output
    assert listener.text("stderr") == "to err\n" == r.error


def test_listener_sees_everything_while_the_result_stays_capped(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(overrides={"sandbox.max_stdout_bytes": 1000})
    seen: list[bytes] = []
    result = runtime.execute("for i in range(500):\n    print('line %03d' % i)\n",
                             on_output=lambda stream, data: seen.append(data))
    assert b"".join(seen).decode() == "".join(f"line {i:03d}\n" for i in range(500))
    assert len(result.output) < 1500 and "truncated" in result.output
    assert result.output_spill_path is not None


def test_kernel_cells_stream_without_the_sentinel(make_runtime: Callable[..., Runtime], workspace: Path) -> None:
    runtime = make_runtime()
    runtime.execute("x = 1", session="k")
    listener = Listener(workspace, b"cell")
    result = runtime.execute("print('cell', x)\n" + WAIT_FOR_GO, session="k", on_output=listener, timeout=60)
    assert result.status == "success", result.error
    assert listener.text("stdout") == "cell 1\n"
    assert b"HERALD_KERNEL" not in b"".join(d for _, d in listener.chunks)


def test_a_failing_listener_does_not_cost_the_run(make_runtime: Callable[..., Runtime]) -> None:
    def broken(stream: str, data: bytes) -> None:
        raise RuntimeError("display broke")

    result = make_runtime().execute("print('still here')", on_output=broken)
    assert result.status == "success"
    assert result.output == "still here\n"
