"""The system prompt and the execute_code tool, built once per session.

The execute_code description is generated from the registry (the same `signatures` the sandbox
stubs are written from), so it always lists the functions a script can really call, with the
limits that apply. The system prompt never changes during a session: it is the prefix providers
cache, and anything that varies (budget notes, guardrail warnings, compaction digests) goes into
the conversation instead.
"""

from __future__ import annotations

import platform
from typing import Any

from ..config import Settings
from ..runtime.sandbox.stubgen import HELPERS, signatures
from ..tools.registry import Tool, ToolContext
from ..tools.resources import ANY_FILE, BROWSER, SANDBOX, SHELL, fixed

EXECUTE_CODE = "execute_code"


def execute_code_description(script_tools: list[Tool], settings: Settings) -> str:
    limits = settings.sandbox
    lines = []
    for tool, signature in zip(script_tools, signatures(script_tools), strict=True):
        summary = tool.description.strip().splitlines()[0]
        lines.append(f"  {signature}\n      {summary}" + (f" Returns {tool.returns}." if tool.returns else ""))
    stubs = "\n".join(lines) or "  (no tools are enabled for scripts in this session)"
    return (
        "Run a Python 3 script in a sandboxed interpreter. It imports Herald's tools as plain "
        "functions and every call runs the real tool on the workspace; only what the script prints "
        "comes back to you, so one script can replace dozens of tool calls.\n\n"
        "from hermes_tools import " + ", ".join([t.name for t in script_tools] + HELPERS) + "\n\n"
        f"Functions (each returns a dict; a failure raises hermes_tools.ToolError whose message says what to do):\n{stubs}\n"
        "Helpers: parallel(*calls) runs calls concurrently (each a zero-argument callable or a "
        "(function, *args) tuple; results in call order); json_parse(text) parses JSON leniently; "
        "shell_quote(value) quotes for the shell; retry(fn, *args, attempts=3) retries on ToolError.\n\n"
        "Use a script when the work takes more than two or three calls: many files, bulk edits, "
        "paging through results (next_offset), reading and cross-referencing, loops, filtering, "
        "anything whose next step depends on a previous result. Do not use one for a single quick "
        "look at a file or one search: call that tool directly.\n"
        "Print compact summaries (counts, paths, the lines that matter), not whole files.\n\n"
        f"Limits: {limits.timeout:g} s per script (then the whole process tree is killed), "
        f"{limits.max_tool_calls} tool calls per script, {limits.max_parallel_calls} concurrent calls, "
        f"stdout kept up to {limits.max_stdout_bytes:,} bytes (head and tail; the full text is saved "
        "to a file whose path is returned). Act on the workspace through these functions.\n"
        "Returns: {status: success|error|timeout|interrupted, output, error, exit_code, "
        "tool_calls_made, duration_seconds, output_spill_path, ...}."
    )


def execute_code_tool(script_tools: list[Tool], settings: Settings) -> Tool:
    """The agent-level execute_code tool (its handler lives in the agent, which owns the Runtime)."""

    def not_here(args: dict[str, Any], ctx: ToolContext) -> Any:
        raise RuntimeError("execute_code is run by the agent, not through the dispatcher")

    return Tool(
        name=EXECUTE_CODE,
        description=execute_code_description(script_tools, settings),
        parameters={
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python script. Print what you want to see."},
            },
            "required": ["code"],
        },
        handler=not_here,
        sandbox=False,
        # A script may use the shell, the browser and any file (its own calls lock what they touch).
        touches=fixed(SANDBOX, SHELL, BROWSER, ANY_FILE),
        mutates=True,
        refunds_turn=True,
    )


def system_prompt(*, backend_name: str, cwd: str, direct_tools: list[Tool], settings: Settings) -> str:
    direct = ", ".join(t.name for t in direct_tools) or "none"
    return (
        "You are Herald, an agent that completes tasks by running tools in a workspace.\n\n"
        f"Workspace: the {backend_name} backend, working directory {cwd} "
        f"(Herald runs on {platform.system()} {platform.release()}). Relative paths resolve there.\n\n"
        "How to work:\n"
        f"- {EXECUTE_CODE} is your main tool. Put multi-step work in one Python script that imports "
        "the tools from hermes_tools, loops over files or result pages, edits, checks its own work "
        "and prints a short report. Intermediate results stay in the script instead of this "
        "conversation, which is faster and far cheaper than one tool call per turn.\n"
        f"- Direct tools ({direct}) are for single, quick steps: one look at a file, one search, a "
        "result you must read in full before deciding. Independent direct calls can go in the "
        "same turn; read-only ones then run concurrently.\n"
        "- Use todo for work with several steps, and keep it current.\n"
        "- If a call fails, read the error: it says what to do next. Do not repeat a failing call "
        "unchanged.\n"
        "- Verify changes (run the tests or a check) before you finish.\n"
        "- When the task is done, answer in plain text without a tool call: what you did, what you "
        "found, anything left open. That answer ends the session.\n"
        f"- You have a budget of {settings.agent.max_turns} turns; a turn that only runs "
        f"{EXECUTE_CODE} is not charged."
    )
