"""`herald exec | run | sessions | tools | doctor | demo` — the command line.

Exit codes of `herald exec`: 0 success, 1 error, 124 timeout, 130 interrupted, 2 bad usage
(an unreadable script, an unknown tool, a bad setting).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .backends.base import Backend, BackendError
from .config import ConfigError, Settings, load_settings

EXIT_CODES = {"success": 0, "error": 1, "timeout": 124, "interrupted": 130}
USAGE_ERROR = 2

err = Console(stderr=True, highlight=False)


class UsageError(Exception):
    """Something the person running herald must fix; the message says what."""


class BackendUnavailable(Exception):
    """The selected backend cannot be reached or started; the message says why (exit 1)."""


def _settings(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Settings:
    try:
        return load_settings(Path(args.config) if args.config else None, overrides=overrides or {})
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _read_script(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    if not path.is_file():
        raise UsageError(f"script {source} not found (pass a Python file, or - to read from stdin)")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read script {source}: {exc}") from None


def _open_backend(spec: str, settings: Settings, cwd: str | None) -> Backend:
    """The backend `spec` names, connected. `cwd` is a directory here for the local backend
    (default: the current one), or a directory on the remote host / in the container."""
    from .backends.factory import BackendSpecError, open_backend

    if spec.strip().lower() in ("", "local"):
        if not os.path.isdir(cwd or "."):
            raise UsageError(f"--cwd {cwd}: no such directory")
        cwd = os.path.abspath(cwd or os.getcwd())
    try:
        backend = open_backend(spec, settings=settings, cwd=cwd)
    except (BackendSpecError, ConfigError) as exc:
        raise UsageError(str(exc)) from None
    connect = getattr(backend, "connect", None)  # remote backends: fail here, not in the script
    if callable(connect):
        try:
            connect()
        except BackendError as exc:
            backend.close()
            raise BackendUnavailable(f"the {backend.name} backend is not usable: {exc}") from None
    return backend


def cmd_exec(args: argparse.Namespace) -> int:
    from .runtime import Runtime
    from .runtime.sandbox.process import SandboxStartError

    code = _read_script(args.script)
    overrides = {"sandbox.timeout": args.timeout, "sandbox.max_tool_calls": args.max_tool_calls,
                 "browser.cdp_url": args.browser_cdp}
    overrides["sandbox.exec_mode"] = args.exec_mode
    settings = _settings(args, overrides)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else None
    backend = _open_backend(args.backend or settings.backend, settings, args.cwd)
    try:
        try:
            runtime = Runtime(backend, settings=settings, tools=tools)
        except (ValueError, SandboxStartError) as exc:  # unknown tool names; no python in the backend
            raise UsageError(str(exc)) from None
        with runtime:
            previous = signal.getsignal(signal.SIGINT)

            def on_sigint(signum: int, frame: FrameType | None) -> None:
                runtime.interrupt()
                signal.signal(signal.SIGINT, previous)  # a second Ctrl-C stops herald itself

            signal.signal(signal.SIGINT, on_sigint)
            try:
                result = runtime.execute(code)
            except SandboxStartError as exc:
                raise UsageError(str(exc)) from None
            finally:
                signal.signal(signal.SIGINT, previous)
    finally:
        backend.close()
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
        return EXIT_CODES[result.status]
    sys.stdout.write(result.output)
    sys.stdout.flush()
    if result.error:
        sys.stderr.write(result.error if result.error.endswith("\n") else result.error + "\n")
    style = "green" if result.ok else "red"
    err.print(
        f"[{style}]{result.status}[/] · exit {result.exit_code} · {result.tool_calls_made} tool "
        f"call(s) · {result.duration_seconds:.2f} s"
        + (f" · full output: {result.output_spill_path}" if result.output_spill_path else ""),
        style="dim",
    )
    return EXIT_CODES[result.status]


def cmd_tools(args: argparse.Namespace) -> int:
    from .runtime.sandbox.stubgen import signatures
    from .tools.registry import default_registry

    registry = default_registry()
    settings = _settings(args)
    try:
        tools = registry.select(settings.tools)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps([t.llm_schema() for t in tools], indent=2))
        return 0
    out = Console(highlight=False)
    out.print("[bold]hermes_tools[/] — callable from execute_code scripts:\n")
    script_tools = [t for t in tools if t.sandbox]
    for tool, line in zip(script_tools, signatures(script_tools), strict=True):
        out.print(f"  [cyan]{line}[/]")
        out.print(f"      {tool.description.splitlines()[0]}", style="dim")
    direct = [t.name for t in tools if not t.sandbox]
    if direct:
        out.print(f"\nDirect-call only: {', '.join(direct)}")
    out.print("\nHelpers: parallel(*calls), json_parse(text), shell_quote(value), retry(fn, *args)")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .backends.local import LocalBackend
    from .runtime import Runtime

    table = Table(title="herald doctor", show_lines=False)
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail")
    failures = 0

    def row(name: str, ok: bool | None, detail: str) -> None:
        nonlocal failures
        mark = "[green]ok[/]" if ok else ("[yellow]warn[/]" if ok is None else "[red]fail[/]")
        failures += ok is False
        table.add_row(name, mark, detail)

    row("python", sys.version_info >= (3, 11), sys.version.split()[0])
    try:
        settings = _settings(args)
        row("config", True, str(Path(args.config) if args.config else "defaults + ~/.config/herald/config.toml"))
    except UsageError as exc:
        row("config", False, str(exc))
        settings = Settings()
    row("bash", shutil.which("bash") is not None, shutil.which("bash") or "bash is required by the local backend")
    rg = shutil.which("rg")
    row("ripgrep", True if rg else None, rg or "not installed: search_files uses the slower pure-Python search")
    from .browser.launch import find_chromium, redact

    chromium = find_chromium(settings.browser.executable)
    browser_detail = f"attaches to {redact(settings.browser.cdp_url)}" if settings.browser.cdp_url else chromium
    row("browser", True if browser_detail else None, browser_detail or "no Chromium: apt-get install chromium, or set browser.cdp_url")
    try:
        with LocalBackend(os.getcwd(), settings=settings) as backend, Runtime(backend, settings=settings, transcript=False) as rt:
            result = rt.execute("from hermes_tools import terminal\nprint(terminal('echo ok')['output'])", timeout=30)
        row("backend local", result.ok and result.output.strip() == "ok", result.error.strip()[:200] or "sandbox + RPC + shell round trip")
    except Exception as exc:
        row("backend local", False, f"{type(exc).__name__}: {exc}")
    from .backends.doctor import backend_checks

    for name, ok, detail in backend_checks(settings):
        row(f"backend {name}", ok, detail)
    Console().print(table)
    return 1 if failures else 0


def cmd_demo(args: argparse.Namespace) -> int:
    examples = Path(__file__).resolve().parent.parent / "examples"
    sys.path.insert(0, str(examples))
    try:
        import demo  # examples/demo.py: builds the sample project and runs the script on it
    except ImportError:
        raise UsageError(f"the demo lives in {examples}; run it from a source checkout") from None
    result: int = demo.main(Path(args.dir))
    return result


def cmd_run(args: argparse.Namespace) -> int:
    from .agent.commands import CommandUsageError, run_command

    overrides = {"agent.provider": args.provider, "agent.model": args.model, "agent.base_url": args.base_url,
                 "agent.max_turns": args.max_turns, "backend": args.backend}
    if args.cwd and not os.path.isdir(args.cwd):
        raise UsageError(f"--cwd {args.cwd}: no such directory")
    try:
        return run_command(_settings(args, overrides), task=args.task, resume=args.resume,
                           cwd=os.path.abspath(args.cwd) if args.cwd else None, as_json=args.json)
    except CommandUsageError as exc:
        raise UsageError(str(exc)) from None


def cmd_sessions(args: argparse.Namespace) -> int:
    from .agent.commands import sessions_command

    return sessions_command(_settings(args), as_json=args.json, limit=args.limit)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="herald", description="Sandboxed code execution with programmatic tool calling.")
    parser.add_argument("--version", action="version", version=f"herald {__version__}")
    parser.add_argument("--config", help="config file (default: $HERALD_CONFIG or ~/.config/herald/config.toml)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("exec", help="run a Python script that calls Herald's tools")
    p.add_argument("script", help="path of the script, or - for stdin")
    p.add_argument("--timeout", type=float, help="seconds before the script is killed (default 300)")
    p.add_argument("--max-tool-calls", type=int, help="most tool calls the script may make (default 50)")
    p.add_argument("--tools", help="comma-separated tools the script may call (default: all)")
    p.add_argument("--cwd", help="working directory: here for the local backend (default: the current one), on the host or in the container for the others")
    p.add_argument("--backend", help="where commands run and files live: local | docker[:IMAGE] | ssh://USER@HOST[:PORT] | modal[:IMAGE] (default: setting backend, local)")
    p.add_argument("--exec-mode", choices=["host", "backend"],
                   help="where the script itself runs: host (default: here) or backend (inside it: open() acts there)")
    p.add_argument("--browser-cdp", metavar="URL", help="drive the browser at this CDP URL instead of launching Chromium")
    p.add_argument("--json", action="store_true", help="print the whole result object as JSON")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("tools", help="list the tools scripts can call, with their signatures")
    p.add_argument("--json", action="store_true", help="print the LLM function schemas instead")
    p.set_defaults(func=cmd_tools)

    p = sub.add_parser("doctor", help="check what works on this machine")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("demo", help="bulk read-patch-verify over a generated sample project")
    p.add_argument("--dir", default=".demo", help="where to generate the sample project (default .demo)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("run", help="give a task to the agent (a model with execute_code and the tools)")
    p.add_argument("task", nargs="?", help="what to do (optional with --resume)")
    p.add_argument("--provider", help="openai | anthropic | openrouter | ollama | vllm | custom (default: from the API keys set)")
    p.add_argument("--model", help="model name, e.g. gpt-4.1 or claude-sonnet-4-5")
    p.add_argument("--base-url", help="API endpoint (OpenAI-compatible, or Anthropic for /anthropic URLs)")
    p.add_argument("--backend", help="where tools run: local (default) | docker[:IMAGE] | ssh://USER@HOST[:PORT] | modal")
    p.add_argument("--cwd", help="working directory of the local backend (default: here)")
    p.add_argument("--max-turns", type=int, help="model turns before a forced summary (default 90)")
    p.add_argument("--resume", metavar="ID", help="continue a saved session (an id, a unique prefix, or 'last')")
    p.add_argument("--json", action="store_true", help="no live view; print the result as JSON")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sessions", help="list saved agent sessions")
    p.add_argument("--json", action="store_true", help="print them as JSON")
    p.add_argument("--limit", type=int, default=50, help="show at most this many (newest first; default 50)")
    p.set_defaults(func=cmd_sessions)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except UsageError as exc:
        err.print(f"[red]herald: {escape(str(exc))}[/]")  # messages show [brackets]
        return USAGE_ERROR
    except BackendUnavailable as exc:
        err.print(f"[red]herald: {escape(str(exc))}[/]")  # messages show [brackets]
        return 1


if __name__ == "__main__":
    sys.exit(main())
