"""The system prompt and the execute_code tool, built once per session.

The execute_code description is generated from the offer of script tools (runtime/execute_code.py).
The system prompt never changes during a session: it is the prefix providers cache, and anything
that varies (budget notes, guardrail warnings, compaction digests) goes into the conversation
instead.
"""

from __future__ import annotations

import platform
from typing import Any

from ..config import Settings
from ..runtime.execute_code import EXECUTE_CODE, PARAMETERS, execute_code_description
from ..tools.registry import Tool, ToolContext
from ..tools.resources import ANY_FILE, BROWSER, SANDBOX, SHELL, fixed


def execute_code_tool(script_tools: list[Tool], settings: Settings) -> Tool:
    """The agent-level execute_code tool (its handler lives in the agent, which owns the Runtime)."""

    def not_here(args: dict[str, Any], ctx: ToolContext) -> Any:
        raise RuntimeError("execute_code is run by the agent, not through the dispatcher")

    return Tool(
        name=EXECUTE_CODE,
        description=execute_code_description(script_tools, settings),
        parameters=PARAMETERS,
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
