"""`herald tools`: what a session offers — the stub signatures scripts call, or the schemas a
model is given (`--json`, in OpenAI or Anthropic format, execute_code included)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.markup import escape

from .common import UsageError, console, load

FORMATS = ("openai", "anthropic")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tools", parents=parents, help="list the tools scripts can call, with their signatures")
    p.add_argument("--json", action="store_true", help="print the function schemas a model is given, execute_code first")
    p.add_argument("--format", choices=FORMATS, default="openai", help="schema format for --json (default openai)")
    p.add_argument("--tools", help='comma-separated tools to enable (default: all; "" for none)')
    p.set_defaults(func=cmd_tools)


def model_schemas(settings: Any, fmt: str) -> list[dict[str, Any]]:
    """The schemas `herald run` gives the model: execute_code, then every enabled tool."""
    from ..agent.prompts import execute_code_tool
    from ..agent.providers.anthropic_messages import to_anthropic_tools
    from ..tools.registry import default_registry

    registry = default_registry()
    try:
        tools = registry.select(settings.tools)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    script_tools = [t for t in tools if t.sandbox]
    schemas = [execute_code_tool(script_tools, settings).llm_schema(), *(t.llm_schema() for t in tools)]
    return to_anthropic_tools(schemas) if fmt == "anthropic" else schemas


def cmd_tools(args: argparse.Namespace) -> int:
    from ..runtime.sandbox.stubgen import signatures
    from ..tools.registry import default_registry

    settings = load(args, {"tools": args.tools})
    if args.json:
        print(json.dumps(model_schemas(settings, args.format), indent=2, ensure_ascii=False))
        return 0
    try:
        tools = default_registry().select(settings.tools)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = console()
    out.print("[bold]hermes_tools[/] — callable from execute_code scripts:\n")
    script_tools = [t for t in tools if t.sandbox]
    for tool, line in zip(script_tools, signatures(script_tools), strict=True):
        out.print(f"  [cyan]{escape(line)}[/]")
        out.print(f"      {escape(tool.description.splitlines()[0])}", style="dim")
    if not script_tools:
        out.print("  (none enabled)")
    direct = [t.name for t in tools if not t.sandbox]
    if direct:
        out.print(f"\nDirect-call only: {escape(', '.join(direct))}")
    out.print("\nHelpers: parallel(*calls), json_parse(text), shell_quote(value), retry(fn, *args)")
    return 0
