"""What every `herald` subcommand shares: usage errors, consoles, settings from file + `-c` + flags,
the data directory check and opening a backend."""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, BackendError
from ..config import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from rich.console import Console

USAGE_ERROR = 2
# rich is imported on first use, not with the CLI: a `herald exec` that prints only the script's
# output (or --json) never needs it, and the one that ends with a summary line imports it on a
# thread while its script runs (`import_rich_meanwhile`), not after.
RICH_MODULES = ("rich.console", "rich.markup")


class UsageError(Exception):
    """Something the person running herald must fix; the message says what (exit 2)."""


class BackendUnavailable(Exception):
    """The selected backend cannot be reached or started; the message says why (exit 1)."""


def console(*, stderr: bool = False) -> Console:
    """A rich console for stdout or stderr. On a terminal it wraps to the terminal's width; piped
    into a file or another program, lines are never hard-wrapped (logs and grep see whole lines)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, highlight=False, emoji=False)
    return Console(stderr=stderr, highlight=False, emoji=False, soft_wrap=True, width=10_000)


def escape(text: str) -> str:
    """`text` with rich's markup characters escaped, to print as it is."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def import_rich_meanwhile() -> None:
    """Import rich on a daemon thread now, for a console wanted later: the caller is about to
    wait (for the network, a script), and the import then costs it nothing."""

    def load() -> None:
        import importlib

        for name in RICH_MODULES:
            importlib.import_module(name)

    threading.Thread(target=load, name="herald-import-rich", daemon=True).start()


def positive_seconds(text: str) -> float:
    """argparse type for durations: a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def count(text: str) -> int:
    """argparse type for counts: a whole number, zero or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`-c key=value` options as overrides. The value is read as TOML when it parses
    (`-c sandbox.timeout=60`, `-c tools=["read_file"]`), else taken as a plain string
    (`-c backend=docker`, `-c tools=` for no tools)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-c {item}: expected KEY=VALUE, e.g. -c sandbox.timeout=60")
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        overrides[key.strip()] = value
    return overrides


def load(args: argparse.Namespace, flags: dict[str, Any] | None = None) -> Settings:
    """Settings: defaults < config file < environment < `-c` options < explicit flags."""
    config = getattr(args, "config_sub", None) or getattr(args, "config", None)
    assignments = [*(getattr(args, "set_top", None) or []), *(getattr(args, "set_sub", None) or [])]
    try:
        settings = load_settings(Path(config) if config else None)
        settings = settings.with_overrides(parse_assignments(assignments), source="-c option")
        return settings.with_overrides(flags or {}, source="command-line flag")
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def explicit_keys(args: argparse.Namespace, flags: dict[str, Any]) -> set[str]:
    """The dotted setting keys this command line chose (flags given and `-c` options): what a
    resumed session must not override with what it saved."""
    assignments = [*(getattr(args, "set_top", None) or []), *(getattr(args, "set_sub", None) or [])]
    return set(parse_assignments(assignments)) | {key for key, value in flags.items() if value is not None}


def ensure_data_dir(settings: Settings) -> None:
    """Herald writes transcripts, spill files and sessions under data_dir: fail early, in one
    line, when it cannot."""
    path = settings.data_dir
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".herald-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(
            f"the data directory {path} is not writable ({reason}): set HERALD_DATA_DIR or "
            "data_dir in the config file to a directory you can write"
        ) from None


def open_backend(
    spec: str, settings: Settings, cwd: str | None, *, where: str | None = None, fix: str = "",
    check_remote_cwd: bool = False,
) -> Backend:
    """The backend `spec` names, connected. `cwd` is a directory here for the local backend
    (default: the current one), or a directory on the remote host / in the container; with
    `check_remote_cwd` it must exist there too. `where` names the directory in errors (default
    "--cwd DIR"), `fix` is appended to them."""
    backend = new_backend(spec, settings, cwd, where=where, fix=fix)
    connect_backend(backend, cwd, where=where, fix=fix, check_remote_cwd=check_remote_cwd)
    return backend


def new_backend(spec: str, settings: Settings, cwd: str | None, *, where: str | None = None, fix: str = "") -> Backend:
    """`open_backend`'s first half: the backend made (its modules imported), not yet connected."""
    from ..backends.factory import BackendSpecError
    from ..backends.factory import open_backend as open_named

    if spec.strip().lower() in ("", "local"):
        if cwd is not None and not os.path.isdir(cwd):
            raise UsageError(f"{where or f'--cwd {cwd}'}: no such directory{fix}")
        cwd = os.path.abspath(cwd or os.getcwd())
    try:
        return open_named(spec, settings=settings, cwd=cwd)
    except (BackendSpecError, ConfigError) as exc:
        raise UsageError(str(exc)) from None


def connect_backend(backend: Backend, cwd: str | None, *, where: str | None = None, fix: str = "",
                    check_remote_cwd: bool = False) -> None:
    """`open_backend`'s second half: a remote backend connected (closed if it cannot be)."""
    if backend.name == "local":
        return
    try:
        backend.connect()  # remote backends: fail here, not in the script
        if check_remote_cwd and cwd is not None:  # where the shell starts (a relative cwd resolved there)
            found = backend.stat(backend.cwd)
            if found is None or not found.is_dir:
                backend.close()
                raise UsageError(f"{where or f'--cwd {cwd}'}: no such directory on the {backend.name} backend{fix}")
    except BackendError as exc:
        backend.close()
        raise BackendUnavailable(f"the {backend.name} backend is not usable: {exc}") from None


def add_config_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--config and -c, accepted before the subcommand (top) and after it."""
    suffix = "top" if top else "sub"
    parser.add_argument(
        "--config", dest="config" if top else "config_sub", default=None if top else argparse.SUPPRESS, metavar="FILE",
        help="config file (default: $HERALD_CONFIG or ~/.config/herald/config.toml)",
    )
    parser.add_argument(
        "-c", dest=f"set_{suffix}", action="append", metavar="KEY=VALUE",
        default=None if top else argparse.SUPPRESS,
        help="override a setting, e.g. -c sandbox.timeout=60 -c backend=docker (repeatable)",
    )


def add_runtime_options(parser: argparse.ArgumentParser) -> None:
    """The flags that shape a Runtime, shared by `exec`, `run` and `mcp serve`."""
    parser.add_argument("--timeout", type=positive_seconds, help="seconds before a script is killed (default 300)")
    parser.add_argument("--max-tool-calls", type=count, help="most tool calls one script may make (default 50)")
    parser.add_argument("--tools", help='comma-separated tools scripts may call (default: all; "" for none)')
    parser.add_argument(
        "--cwd",
        help="working directory: here for the local backend (default: the current one), "
        "on the host or in the container for the others",
    )
    parser.add_argument(
        "--backend",
        help="where commands run and files live: local | docker[:IMAGE] | ssh://USER@HOST[:PORT] | modal[:IMAGE] "
        "(default: setting backend, local)",
    )
    parser.add_argument(
        "--exec-mode",
        choices=["host", "backend"],
        help="where the script itself runs: host (default: here) or backend (inside it: open() acts there)",
    )
    parser.add_argument(
        "--browser-cdp", metavar="URL", help="drive the browser at this CDP URL instead of launching Chromium"
    )
    add_profile_option(parser)


def add_profile_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=["read-only", "workspace-write", "full"],
                        help="permission profile for every tool call: read-only, workspace-write (default: "
                             "files only inside the workspace) or full (no confinement); setting policy.profile")


def runtime_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings overrides that `add_runtime_options` flags ask for (None: not given)."""
    return {
        "sandbox.timeout": args.timeout,
        "sandbox.max_tool_calls": args.max_tool_calls,
        "sandbox.exec_mode": args.exec_mode,
        "browser.cdp_url": args.browser_cdp,
        "backend": args.backend,
        "tools": args.tools,  # "" is a value: no tools (never "all" by accident)
        "policy.profile": args.profile,
    }
