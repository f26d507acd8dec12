"""The `herald` command line: `exec | run | sessions | replay | checkpoints | tools | doctor | demo | mcp`.

One module per command family; `common.py` holds what they share (settings from the config file,
`-c KEY=VALUE` and flags; usage errors; consoles; opening a backend). Exit code 2 is bad usage:
the message says what to fix.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
from typing import NoReturn

from .. import __version__
from ..keys import take_api_keys
from . import agent, checkpoints, doctor, exec, mcp, sessionreplay, tools
from .common import USAGE_ERROR, BackendUnavailable, UsageError, add_config_options, console, escape
from .signals import Stopped


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="herald", description="Sandboxed code execution with programmatic tool calling."
    )
    parser.add_argument("--version", action="version", version=f"herald {__version__}")
    add_config_options(parser, top=True)
    shared = argparse.ArgumentParser(add_help=False)
    add_config_options(shared, top=False)
    sub = parser.add_subparsers(dest="command", required=True)
    exec.add_parser(sub, [shared])
    tools.add_parser(sub, [shared])
    doctor.add_parser(sub, [shared])
    agent.add_parsers(sub, [shared])
    mcp.add_parser(sub, [shared])
    sessionreplay.add_parser(sub, [shared])
    checkpoints.add_parser(sub, [shared])
    return parser


def main(argv: list[str] | None = None) -> int:
    take_api_keys()  # out of os.environ before anything starts (keys.py)
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except UsageError as exc:
        console(stderr=True).print(f"[red]herald: {escape(str(exc))}[/]")
        return USAGE_ERROR
    except BackendUnavailable as exc:
        console(stderr=True).print(f"[red]herald: {escape(str(exc))}[/]")
        return 1
    except Stopped as exc:  # a stop signal before anything ran: nothing to report
        return exc.exit_code


def run() -> NoReturn:
    """The `herald` command: `main`, then `leave`."""
    leave(main())


def leave(code: int) -> NoReturn:
    """End the process with `code` now that its work is done, without Python's teardown: the
    clean-ups registered with atexit run (logging's flush, temporary directories), the output is
    flushed, and the process exits without freeing every module one by one (about a tenth of
    a short `herald exec`). A thread that is not a daemon still running: the usual exit, which
    waits for it."""
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    if any(t.is_alive() for t in others):
        sys.exit(code)
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or file: nothing more to say there
                pass
        os._exit(code)


if __name__ == "__main__":
    run()
