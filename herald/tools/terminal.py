"""`terminal`: run a shell command in the session's persistent shell on the active backend."""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from .._sandbox.shell.localshell import EMPTY_COMMAND
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
    pid: NotRequired[Annotated[int, "background=True: the started process"]]
    log: NotRequired[Annotated[str, "background=True: where its output goes, on the backend"]]


FOREGROUND_ONLY = (
    "scripts run commands in the foreground only, so '{arg}' is not supported inside "
    "execute_code. Run the command without it (it returns when the command ends). To keep a "
    "server running, start it with a direct terminal call (not from a script) with background=True, "
    "e.g. terminal('python3 app.py', background=True): it lives on with the session."
)


def terminal(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    command: str = args["command"]
    if not command.strip():
        raise ToolError(EMPTY_COMMAND)
    if args.get("background"):
        return _start_in_background(command, args, ctx)
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


def _start_in_background(command: str, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Start `command` as a job of the session's shell, its output to a log file on the backend,
    and return at once: the job lives as long as the session (a server that later runs use).
    The command sits on lines of its own inside a brace group, so its own `&`, `;` or a trailing
    comment cannot change what is redirected or put in the background."""
    if call_confinement() is not None:
        raise ToolError(
            "terminal: background=True starts a process that outlives the call, and the read-only profile "
            "confines each command to the call. Use --profile workspace-write (setting policy.profile) to "
            "start a server.", "PolicyRefused")
    log = f"/tmp/herald-background-{secrets.token_hex(4)}.log"
    wrapped = f"{{\n{command}\n}} > {log} 2>&1 < /dev/null &\necho \"$!\""
    try:
        result = ctx.backend.run(wrapped, timeout=args["timeout"], workdir=args["workdir"])
    except BackendError as exc:
        raise ToolError(f"terminal: the {ctx.backend.name} backend failed: {exc}", "BackendError") from None
    pid_text = result.output.strip().splitlines()[-1:] or [""]
    if result.exit_code != 0 or not pid_text[0].isdigit():
        raise ToolError(f"terminal: could not start it in the background (exit {result.exit_code}): "
                        f"{result.output.strip()[:500]}", "CommandFailed")
    pid = int(pid_text[0])
    return {
        "output": f"Started in the background as pid {pid}; its output goes to {log} (read it with "
                  f"terminal('tail -n 50 {log}')). It runs until it exits or the session ends; stop it "
                  f"with terminal('kill {pid}').",
        "exit_code": 0, "pid": pid, "log": log,
    }


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
            "long-lived server with a direct call with background=True instead."
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
                "background": {
                    "type": "boolean",
                    "default": False,
                    "description": (
                        "Start the command and return at once (a server for later runs, e.g. "
                        "'python3 -m http.server 8000'): its pid and a log file on the backend come back. "
                        "Direct calls only; it lives until it exits or the session ends."
                    ),
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
