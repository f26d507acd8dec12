"""parallel() of tool stubs: the calls go out together from the calling thread on one
connection (no thread per call) and Herald runs them side by side, within the run's cap on
concurrent calls; replies come back in any order and land in call order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from herald import Runtime
from herald.tools.registry import Tool

from ._helpers import run_ok
from .test_execute import custom_registry, meet_tool

RuntimeFactory = Callable[..., Runtime]


class Gauge:
    """A tool that counts how many of its calls run at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0

    def handler(self, args: dict[str, Any], ctx: Any) -> Any:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.05)  # room to overlap with the others (no verdict depends on how much)
            return args["value"]
        finally:
            with self.lock:
                self.now -= 1

    def tool(self) -> Tool:
        return Tool(name="gauge", description="Count concurrent calls; return `value`.",
                    parameters={"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]},
                    handler=self.handler)


def _gauged(make_runtime: RuntimeFactory, **overrides: Any) -> tuple[Runtime, Gauge]:
    gauge = Gauge()
    return make_runtime(registry=custom_registry(gauge.tool()), overrides=overrides), gauge


def test_stub_calls_run_together_on_one_connection_without_threads(make_runtime: RuntimeFactory) -> None:
    """16 calls meet at a barrier (they can only return if all run at once); the script
    starts no thread and opens one connection for them."""
    made: list[Runtime] = []
    meet = meet_tool(16)
    seen: set[int] = set()

    def counting(args: dict[str, Any], ctx: Any) -> Any:
        seen.add(made[0]._server.connection_count())
        return meet.handler(args, ctx)

    runtime = make_runtime(registry=custom_registry(Tool(name="meet", description=meet.description,
                                                         parameters=meet.parameters, handler=counting)))
    made.append(runtime)
    result = run_ok(runtime, """
        import threading
        from hermes_tools import parallel, meet
        print(parallel([(meet, i) for i in range(16)]) == list(range(16)), threading.active_count())
    """, timeout=120)
    assert result.output == "True 1\n", result.output
    assert seen == {1}
    assert result.tool_calls_made == 16


def test_the_run_s_cap_holds_for_calls_sent_together(make_runtime: RuntimeFactory) -> None:
    runtime, gauge = _gauged(make_runtime, **{"sandbox.max_parallel_calls": 3})
    result = run_ok(runtime, """
        from hermes_tools import parallel, gauge
        from _hermes_runtime.child.client import call_many
        print(parallel([(gauge, i) for i in range(10)], max_workers=16) == list(range(10)))
        # The client's own batch, asking for 40 at once: Herald still runs 3 at a time.
        print(call_many([("gauge", {"value": i}) for i in range(40)], 40) == list(range(40)))
    """, timeout=120)
    assert result.output == "True\nTrue\n"
    assert 1 <= gauge.most <= 3


def test_max_workers_bounds_the_calls_in_flight(make_runtime: RuntimeFactory) -> None:
    runtime, gauge = _gauged(make_runtime)
    result = run_ok(runtime, """
        from hermes_tools import parallel, gauge
        print(parallel([(gauge, i) for i in range(9)], max_workers=2))
    """, timeout=120)
    assert result.output == str(list(range(9))) + "\n"
    assert 1 <= gauge.most <= 2


def test_replies_in_any_order_land_in_call_order(make_runtime: RuntimeFactory) -> None:
    runtime = make_runtime(registry=custom_registry())
    result = run_ok(runtime, """
        import os, threading
        from hermes_tools import parallel, wait_echo, terminal
        # Call i returns once the file of call i + 1 exists; the last call makes its file
        # itself (a terminal call), so they return last to first.
        marks = [os.path.abspath("mark%d" % i) for i in range(6)]
        jobs = [(wait_echo, i, marks[i + 1]) for i in range(5)]
        print(parallel(jobs + [(terminal, "touch " + " ".join(marks[1:]))])[:5])
    """, timeout=120)
    assert result.output == "[0, 1, 2, 3, 4]\n"


def test_each_stub_call_fails_on_its_own(make_runtime: RuntimeFactory, workspace: Any) -> None:
    (workspace / "here.txt").write_text("here\n")
    runtime = make_runtime()
    result = run_ok(runtime, """
        from hermes_tools import parallel, read_file, ToolError
        out = parallel((read_file, "nope.txt"), (read_file,), (read_file, "here.txt"), return_exceptions=True)
        print(type(out[0]).__name__, out[0].error_type, type(out[1]).__name__, out[2]["content"])
        try:
            parallel((read_file, "here.txt"), (read_file, "nope.txt"))
        except ToolError as exc:
            print("raised", exc.error_type)
    """)
    assert result.output == "ToolError FileNotFound TypeError      1|here\nraised FileNotFound\n"


def test_the_call_budget_counts_calls_sent_together(make_runtime: RuntimeFactory) -> None:
    runtime, _ = _gauged(make_runtime)
    result = run_ok(runtime, """
        from hermes_tools import parallel, gauge
        out = parallel([(gauge, i) for i in range(5)], return_exceptions=True)
        print(len([o for o in out if isinstance(o, int)]), sorted(o.error_type for o in out if not isinstance(o, int)))
    """, max_tool_calls=3, timeout=120)
    assert result.output == "3 ['ToolCallLimit', 'ToolCallLimit']\n"
    assert result.tool_calls_made == 3
