"""`terminal`: run a shell command in the session's persistent shell on the active backend."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from .._sandbox.localshell import EMPTY_COMMAND
from ..backends.base import CONFINE_PREFERRED, BackendError, NoConfinement, call_confinement
from ..backends.shell import INTERRUPTED_EXIT_CODE, current_cancel
from .context import ToolContext
from .registry import Tool, ToolError
from .resources import ANY_FILE, SHELL, fixed


class TerminalResult(TypedDict):
    output: str
    exit_code: int
    timed_out: NotRequired[Literal[True]]
    interrupted: NotRequired[Literal[True]]
    truncated: NotRequired[Literal[True]]
    note: NotRequired[str]


FOREGROUND_ONLY = (
    "scripts run commands in the foreground only, so '{arg}' is not supported inside "
    "execute_code. Run the command without it (it returns when the command ends). To keep a "
    "server running, start it with a direct terminal call (not from a script) ending in '&', "
    "e.g. terminal('python3 app.py > app.log 2>&1 &'): a direct call's jobs live on with the session."
)


def terminal(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    command: str = args["command"]
    if not command.strip():
        raise ToolError(EMPTY_COMMAND)
    # The dispatcher runs a cancellable call (a model's direct call that an interrupt may stop)
    # inside `cancellable(event)`; the backend's persistent shell honours that event itself.
    cancel = current_cancel()
    confine = call_confinement()  # the policy's word (read-only): the OS confines the command
    unconfined = ""
    try:
        try:
            result = ctx.backend.run(command, timeout=args["timeout"], workdir=args["workdir"],
                                     read_only=confine is not None)
        except NoConfinement as exc:
            if confine != CONFINE_PREFERRED:
                raise ToolError(
                    f"terminal refused by the read-only profile: {exc}, and an unconfined command could change "
                    f"files. To run it anyway, use --profile workspace-write (setting policy.profile), or add a rule "
                    f"such as 'allow terminal command={_first_word(command)}' to policy.rules.", "PolicyRefused"
                ) from None
            unconfined = f"Ran without read-only confinement (a policy rule allowed this command): {exc}."
            result = ctx.backend.run(command, timeout=args["timeout"], workdir=args["workdir"])
    except BackendError as exc:
        raise ToolError(f"terminal: the {ctx.backend.name} backend failed: {exc}", "BackendError") from None
    reply: dict[str, Any] = {"output": result.output, "exit_code": result.exit_code}
    if result.timed_out:
        reply["timed_out"] = True
    if cancel is not None and cancel.is_set() and result.exit_code == INTERRUPTED_EXIT_CODE:
        reply["interrupted"] = True
    if result.truncated:
        reply["truncated"] = True
    note = " ".join(n for n in (unconfined, result.note) if n)
    if note:
        reply["note"] = note
    return reply


def _first_word(command: str) -> str:
    words = command.split()
    return words[0] if words else "COMMAND"


TOOLS = [
    Tool(
        name="terminal",
        description=(
            "Run a shell command in the session's persistent bash (cwd and exported variables "
            "carry over between calls) on the active backend. stdout and stderr are merged. "
            "A command that runs past `timeout` seconds is killed with everything it started. "
            "From execute_code, a command's background jobs (`&`) end when it returns; start a "
            "long-lived server with a direct call instead."
        ),
        parameters={
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command line to run."},
                "timeout": {
                    "type": ["number", "null"],
                    "minimum": 0,
                    "description": "Seconds before the command is killed (default from config, 180).",
                },
                "workdir": {
                    "type": ["string", "null"],
                    "description": "Run this one command in this directory without moving the session.",
                },
            },
            "required": ["command"],
        },
        handler=terminal,
        returns=TerminalResult,
        # One persistent shell, and a command may change any file.
        touches=fixed(SHELL, ANY_FILE),
        mutates=True,
        script_refused_args={
            arg: FOREGROUND_ONLY.format(arg=arg) for arg in ("background", "pty", "check_interval")
        },
    )
]
