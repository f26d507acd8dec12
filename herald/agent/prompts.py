"""The system prompt, built once per session.

It never changes during a session: it is the prefix providers cache, and anything that varies
(budget notes, guardrail warnings, compaction digests) goes into the conversation instead. The
execute_code tool it points to is made by the Runtime (runtime/execute_code.py).
"""

from __future__ import annotations

import platform

from ..config import Settings
from ..runtime.execute_code import EXECUTE_CODE
from ..tools.registry import Tool
from .sessions import SessionState

# Plan mode (`herald run --plan`, `Agent(plan=True)`): the session runs with the read-only profile.
PLAN_MODE = (
    "\n\nPlan mode: this session started in plan mode, under the read-only permission profile. "
    "Look around as much as you need (read files, search, run read-only commands), but change "
    "nothing. Your answer is a plan: the steps you would take, the files and commands involved, "
    "how you would check the result, and the risks or open questions. The person reviews it; if "
    "they approve, Herald tells you plan mode is over in a later message, and then you carry it out."
)
PLAN_APPROVED = (
    "[Herald: plan mode is over: the plan was approved and this session now runs with the {profile} "
    "profile. Carry out the plan, verify it, and report what you did.]"
)
PLAN_NOTE = (
    "[Herald: plan mode: from now on this session runs with the read-only profile. Change nothing; "
    "answer with a plan: the steps you would take, the files and commands involved, how you would "
    "check the result, and the risks or open questions.]"
)


def system_prompt(*, backend_name: str, cwd: str, direct_tools: list[Tool], settings: Settings,
                  plan: bool = False) -> str:
    direct = ", ".join(t.name for t in direct_tools) or "none"
    return _base(backend_name, cwd, direct, direct_tools, settings) + (PLAN_MODE if plan else "")


def _base(backend_name: str, cwd: str, direct: str, direct_tools: list[Tool], settings: Settings) -> str:
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
        + _mcp_note(direct_tools, settings) +
        "- Use todo for work with several steps, and keep it current.\n"
        "- If a call fails, read the error: it says what to do next. Do not repeat a failing call "
        "unchanged.\n"
        "- Verify changes (run the tests or a check) before you finish.\n"
        "- When the task is done, answer in plain text without a tool call: what you did, what you "
        "found, anything left open. That answer ends the session.\n"
        f"- You have a budget of {settings.agent.max_turns} turns; a turn that only runs "
        f"{EXECUTE_CODE} is not charged."
    )


def _mcp_note(direct_tools: list[Tool], settings: Settings) -> str:
    if not any(t.name.startswith("mcp_") and t.sandbox for t in direct_tools):
        return ""
    servers = sorted(name for name, server in settings.mcp_servers.items() if server.enabled)
    return (
        f"- MCP tools (mcp_<server>_<tool>, from {', '.join(servers)}) are hermes_tools functions too: "
        f"many MCP calls belong in one {EXECUTE_CODE} script that loops and filters, not one turn each.\n"
    )


def plan_note(state: SessionState | None, plan: bool, profile: str) -> str:
    """What the next task of a resumed session is prefixed with: plan mode starts (PLAN_NOTE) or
    is over (PLAN_APPROVED); "" when nothing changes."""
    if state is None:
        return ""
    now = _plan_mode_now(state)
    if plan and not now:
        return PLAN_NOTE
    if now and not plan and profile != "read-only":
        return PLAN_APPROVED.format(profile=profile)
    return ""


def _plan_mode_now(state: SessionState) -> bool:
    """Whether the saved session is in plan mode: started in it or told so since, and not told it
    is over."""
    mode = bool(state.meta.get("plan"))
    for message in state.messages:
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        if text.startswith(PLAN_NOTE):
            mode = True
        elif text.startswith(PLAN_APPROVED[:40]):
            mode = False
    return mode
