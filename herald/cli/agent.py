"""`herald run`, `herald sessions` and `herald demo`: thin parsing over agentcommands.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import (
    UsageError,
    add_runtime_options,
    ensure_data_dir,
    explicit_keys,
    load,
    runtime_flags,
)


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    p = sub.add_parser("demo", parents=parents, help="bulk read-patch-verify over a generated sample project")
    p.add_argument("--dir", default=".demo", help="where to generate the sample project (default .demo)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "run", parents=parents, help="give a task to the agent (a model with execute_code and the tools)"
    )
    p.add_argument("task", nargs="?", help="what to do (optional with --resume)")
    p.add_argument(
        "--provider", help="openai | anthropic | openrouter | ollama | vllm | custom (default: from the API keys set)"
    )
    p.add_argument("--model", help="model name, e.g. gpt-4.1 or claude-sonnet-4-5")
    p.add_argument("--base-url", help="API endpoint (OpenAI-compatible, or Anthropic for /anthropic URLs)")
    p.add_argument("--max-turns", type=int, help="model turns before a forced summary (default 90)")
    p.add_argument("--resume", metavar="ID", help="continue a saved session (an id, a unique prefix, or 'last')")
    p.add_argument(
        "--json", action="store_true", help="no live view; JSON lines of events as they happen, then the result"
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="plan mode: read-only, the answer is a plan; carry it out with --resume ID --profile workspace-write",
    )
    add_runtime_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sessions", parents=parents, help="list saved agent sessions")
    p.add_argument("--json", action="store_true", help="print them as JSON")
    p.add_argument("--limit", type=int, default=50, help="show at most this many (newest first; default 50)")
    p.set_defaults(func=cmd_sessions)


def cmd_demo(args: argparse.Namespace) -> int:
    examples = Path(__file__).resolve().parent.parent.parent / "examples"
    sys.path.insert(0, str(examples))
    try:
        import demo  # examples/demo.py: builds the sample project and runs the script on it
    except ImportError:
        raise UsageError(f"the demo lives in {examples}; run it from a source checkout") from None
    result: int = demo.main(Path(args.dir))
    return result


def cmd_run(args: argparse.Namespace) -> int:
    from .agentcommands import CommandUsageError, run_command

    flags = {"agent.provider": args.provider, "agent.model": args.model, "agent.base_url": args.base_url,
             "agent.max_turns": args.max_turns, **runtime_flags(args)}
    settings = load(args, flags)
    ensure_data_dir(settings)
    try:
        return run_command(settings, task=args.task, resume=args.resume, cwd=args.cwd, as_json=args.json,
                           explicit=explicit_keys(args, flags), plan=args.plan)
    except CommandUsageError as exc:
        raise UsageError(str(exc)) from None


def cmd_sessions(args: argparse.Namespace) -> int:
    from .agentcommands import sessions_command

    return sessions_command(load(args), as_json=args.json, limit=args.limit)
