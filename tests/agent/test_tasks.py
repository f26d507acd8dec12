"""The same bulk read-patch-verify task solved in one execute_code turn and through direct calls;
parallel direct calls; what the model is shown (prompt, tools, stubs, streaming)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from herald.agent.events import InnerToolCall, ToolFinished
from herald.agent.providers.base import TextDelta, ToolCallDelta
from herald.runtime.toolset import default_registry
from herald.tools.context import ToolContext
from herald.tools.registry import Registry, Tool
from herald.tools.resources import path_argument
from herald.tools.stubgen import signatures
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

from .conftest import MakeAgent, make_project

BULK_SCRIPT = """
from hermes_tools import search_files, read_file, patch, terminal
hits = search_files(r"legacy_round\\(", path="ledger", file_glob="account_*.py", limit=1000)
files = sorted({m["path"] for m in hits["matches"]})
for path in files:
    assert "legacy_round(" in read_file(path)["content"]
    patch(path, "legacy_round(sum", "round_money(sum")
check = terminal("python3 check.py")
print(len(files), "files patched;", check["output"].strip(), "exit", check["exit_code"])
"""


def test_bulk_patch_in_one_execute_code_turn(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    make_project(workspace, 20)
    llm.script(calls(call("execute_code", code=BULK_SCRIPT), text="One script does it all."),
               reply("Patched 20 modules; check.py passes."))
    agent = make_agent()
    result = agent.run("Replace legacy_round with round_money in ledger/account_*.py and verify with check.py")

    assert result.status == "completed" and result.final_text == "Patched 20 modules; check.py passes."
    assert result.turns == 2 and len(llm.requests) == 2
    [execute] = result.tool_calls
    assert execute.name == "execute_code" and execute.ok and execute.inner_calls == 1 + 20 * 2 + 1
    output = json.loads(result.messages[2]["content"])
    assert output["status"] == "success"
    assert output["output"].strip() == "20 files patched; legacy calls left: 0 exit 0"
    assert all("round_money(sum" in p.read_text() for p in (workspace / "ledger").glob("account_*.py"))
    # Live progress: every inner call was reported while the script ran.
    inner = [e for e in agent.events if isinstance(e, InnerToolCall)]
    assert [e.count for e in inner] == list(range(1, 43))


def test_same_task_through_direct_calls(make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path) -> None:
    paths = make_project(workspace, 6)
    llm.script(
        calls(call("search_files", pattern=r"legacy_round\(", path="ledger", file_glob="account_*.py")),
        calls(*[call("read_file", path=p) for p in paths]),
        calls(*[call("patch", path=p, old_string="legacy_round(sum", new_string="round_money(sum") for p in paths]),
        calls(call("terminal", command="python3 check.py")),
        reply("Patched 6 modules with direct calls; check.py passes."),
    )
    result = make_agent().run("Replace legacy_round with round_money and verify")

    assert result.status == "completed" and result.turns == 5
    assert [c.name for c in result.tool_calls] == ["search_files"] + ["read_file"] * 6 + ["patch"] * 6 + ["terminal"]
    assert all(c.ok for c in result.tool_calls)
    search = json.loads(llm.requests[1].tool_results()[0][1])
    assert sorted({m["path"] for m in search["matches"]}) == paths
    check = json.loads(llm.requests[4].tool_results()[0][1])
    assert check["exit_code"] == 0 and "legacy calls left: 0" in check["output"]
    # Results come back in call order, one per call.
    patch_ids = [c.call_id for c in result.tool_calls[7:13]]
    assert [i for i, _ in llm.requests[3].tool_results()] == patch_ids


def _probe_registry(barrier: threading.Barrier, active: list[int], peak: list[int]) -> Registry:
    lock = threading.Lock()

    def wait_together(args: dict[str, Any], ctx: ToolContext) -> str:
        barrier.wait()  # only returns when all the calls are running at the same time
        return f"seen {args['path']}"

    def count_overlap(args: dict[str, Any], ctx: ToolContext) -> str:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return f"probed {args['path']}"

    params = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    return Registry([
        *default_registry(),
        Tool("wait_together", "Test tool: waits for its siblings.", params, wait_together, touches=path_argument()),
        Tool("count_overlap", "Test tool: records how many calls overlap.", params, count_overlap,
             touches=path_argument()),
    ])


def test_parallel_direct_calls_run_concurrently_and_keep_order(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    barrier = threading.Barrier(4, timeout=20)
    active, peak = [0], [0]
    llm.script(
        calls(*[call("wait_together", path=f"dir{i}/f.txt") for i in range(4)]),
        calls(call("count_overlap", path="data"), call("count_overlap", path="data/x.txt"),
              call("count_overlap", path="./data/y.txt")),
        calls(call("count_overlap", path="a.txt"), call("terminal", command="echo x > b.txt"),
              call("count_overlap", path="c.txt")),
        reply("done"),
    )
    result = make_agent(registry=_probe_registry(barrier, active, peak)).run("probe")

    assert result.status == "completed"
    first = llm.requests[1].tool_results()
    assert [c for _, c in first] == [f"seen dir{i}/f.txt" for i in range(4)]  # all four met at the barrier
    # Calls on different files met at the barrier; overlapping paths, then a terminal command
    # (it may touch any file): one at a time, in order.
    assert peak[0] == 1
    assert [c for _, c in llm.requests[2].tool_results()] == ["probed data", "probed data/x.txt", "probed ./data/y.txt"]
    third = [c for _, c in llm.requests[3].tool_results()]
    assert third[0] == "probed a.txt" and json.loads(third[1])["exit_code"] == 0 and third[2] == "probed c.txt"


def test_model_sees_execute_code_first_with_real_stubs_and_a_fixed_prompt(
    make_agent: MakeAgent, llm: FakeLLMServer, protocol: str
) -> None:
    llm.script(calls(call("read_file", path="nope.txt")), calls(call("todo")), reply("ok"))
    agent = make_agent()
    agent.run("look around")
    agent.run("and again")
    first = llm.requests[0]
    assert first.tool_names[0] == "execute_code"
    assert {"read_file", "write_file", "patch", "search_files", "terminal", "todo"} <= set(first.tool_names)
    tools = first.body["tools"]
    description = tools[0]["function"]["description"] if protocol == "openai" else tools[0]["description"]
    for line in signatures(agent.runtime.dispatcher.script_tools):
        assert line in description
    assert "300 s per script" in description and "500 tool calls per script" in description
    # Built once per session and sent unchanged with every request.
    assert len({r.system for r in llm.requests}) == 1 and "execute_code" in first.system


def test_streaming_surfaces_text_and_tool_call_deltas(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(calls(call("terminal", command="echo streamed"), text="Running a command first."),
               reply("The command printed streamed."))
    agent = make_agent()
    result = agent.run("echo something")
    assert result.final_text == "The command printed streamed."
    texts = "".join(e.text for e in agent.events if isinstance(e, TextDelta))
    assert texts == "Running a command first.The command printed streamed."
    deltas = [e for e in agent.events if isinstance(e, ToolCallDelta)]
    assert deltas[0].name == "terminal"
    assert json.loads("".join(d.arguments for d in deltas)) == {"command": "echo streamed"}
    assert llm.requests[0].body["stream"] is True
    finished = [e for e in agent.events if isinstance(e, ToolFinished)]
    assert finished[0].name == "terminal" and finished[0].ok


def test_non_streaming_mode(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(calls(call("terminal", command="echo plain")), reply("plain"))
    result = make_agent(overrides={"agent.stream": False}).run("echo")
    assert result.status == "completed" and result.final_text == "plain"
    assert "stream" not in llm.requests[0].body or llm.requests[0].body["stream"] is False
    assert json.loads(llm.requests[1].tool_results()[0][1])["output"].strip() == "plain"


def test_anthropic_requests_carry_cache_markers(make_agent: MakeAgent, llm: FakeLLMServer, protocol: str) -> None:
    llm.script(calls(call("read_file", path="x.txt")), calls(call("todo")), reply("ok"))
    make_agent().run("cache me")
    last = llm.requests[-1].body
    if protocol == "openai":
        assert "cache_control" not in json.dumps(last)
        return
    assert last["system"][0]["cache_control"] == {"type": "ephemeral"}
    marked = [m for m in last["messages"] if "cache_control" in m["content"][-1]]
    assert marked == last["messages"][-3:]
    assert json.dumps(last).count("cache_control") == 4  # the API allows four breakpoints


def test_oversized_tool_results_are_cut_with_a_spill_file(
    make_agent: MakeAgent, llm: FakeLLMServer, workspace: Path
) -> None:
    (workspace / "big.log").write_text("".join(f"log line {n:05d} " + "x" * 60 + "\n" for n in range(400)))
    llm.script(calls(call("read_file", path="big.log")), reply("skimmed"))
    result = make_agent(overrides={"agent.max_tool_result_bytes": 4000}).run("read the log")
    content = result.messages[2]["content"]
    assert len(content.encode()) < 4500
    assert "log line 00000" in content and "log line 00399" in content  # head and tail
    assert "[... tool result truncated:" in content
    spill = content.split("full tool result in ")[1].split(" ...]")[0]
    assert "log line 00200" in Path(spill).read_text()  # nothing is lost
    assert llm.requests[1].tool_results()[0][1] == content


def test_unknown_and_disabled_tools_get_a_clear_error(make_agent: MakeAgent, llm: FakeLLMServer) -> None:
    llm.script(calls(call("browse_web", url="x"), call("terminal", command="ls")), reply("ok"))
    result = make_agent(tools=["read_file", "search_files"]).run("try things")
    unknown, disabled = (text for _, text in llm.requests[1].tool_results())
    assert unknown == "Tool 'browse_web' does not exist. Available tools: execute_code, read_file, search_files, todo."
    assert disabled.startswith("Tool 'terminal' is not enabled in this session.")
    assert llm.requests[0].tool_names == ["execute_code", "read_file", "search_files", "todo"]
    assert result.status == "completed"
