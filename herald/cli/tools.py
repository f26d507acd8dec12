"""`herald tools`: what a session offers — the stub signatures scripts call, or the schemas a
model is given (`--json`, in OpenAI or Anthropic format, execute_code included)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from .common import UsageError, add_profile_option, console, escape, load

FORMATS = ("openai", "anthropic")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    p = sub.add_parser("tools", parents=parents, help="list the tools scripts can call, with their signatures")
    p.add_argument(
        "--json", action="store_true", help="print the function schemas a model is given, execute_code first"
    )
    p.add_argument("--format", choices=FORMATS, default="openai", help="schema format for --json (default openai)")
    p.add_argument("--tools", help='comma-separated tools to enable (default: all; "" for none)')
    add_profile_option(p)
    p.set_defaults(func=cmd_tools)


def session_offer(settings: Any) -> Any:
    """What a session with `settings` offers: the same `offer_tools` answer `herald run` uses."""
    from ..runtime.offer import offer_tools
    from ..runtime.toolset import default_registry

    try:
        return offer_tools(default_registry(settings), settings.tools, settings)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def policy_summary(settings: Any, offer: Any) -> str:
    """What the profile in force forbids, as execute_code's description says it (the workspace
    is the current directory plus policy.roots, as for `herald exec`)."""
    from ..policy import Policy, RuleError

    try:
        policy = Policy.from_settings(settings)
    except RuleError as exc:
        raise UsageError(str(exc)) from None
    roots = [os.getcwd(), *(os.path.abspath(os.path.expanduser(r)) for r in settings.policy.roots)]
    return policy.describe(offer.tools, [os.path.realpath(r) for r in roots])


def model_schemas(settings: Any, fmt: str) -> list[dict[str, Any]]:
    """The schemas `herald run` gives the model: execute_code, then every offered tool."""
    from ..agent.providers.anthropic_messages import to_anthropic_tools
    from ..runtime.execute_code import execute_code_schema

    offer = session_offer(settings)
    schemas = [execute_code_schema(offer.script_tools, settings, policy_summary(settings, offer)),
               *(t.llm_schema() for t in offer.tools)]
    return to_anthropic_tools(schemas) if fmt == "anthropic" else schemas


def cmd_tools(args: argparse.Namespace) -> int:
    from ..tools.stubgen import signatures

    settings = load(args, {"tools": args.tools, "policy.profile": args.profile})
    if args.json:
        print(json.dumps(model_schemas(settings, args.format), indent=2, ensure_ascii=False))
        return 0
    offer = session_offer(settings)
    out = console()
    out.print("[bold]hermes_tools[/] — callable from execute_code scripts:\n")
    script_tools = offer.script_tools
    for tool, line in zip(script_tools, signatures(script_tools), strict=True):
        out.print(f"  [cyan]{escape(line)}[/]")
        out.print(f"      {escape(tool.description.splitlines()[0])}", style="dim")
        if tool.returns_shape:
            out.print(f"      returns {escape(tool.returns_shape)}", style="dim")
    if not script_tools:
        out.print("  (none enabled)")
    direct = [t.name for t in offer.tools if not t.sandbox]
    if direct:
        out.print(f"\nDirect-call only: {escape(', '.join(direct))}")
    if offer.withheld:
        out.print("\nNot offered in this session (name one with --tools to offer it anyway):")
        for name, reason in offer.withheld.items():
            out.print(f"  [yellow]{escape(name)}[/]: {escape(reason)}")
    out.print("\nHelpers: parallel(*calls), json_parse(text), shell_quote(value), retry(fn, *args), "
              "transaction(verify=None, *, timeout=None, workdir=None)")
    out.print(f"\n{escape(policy_summary(settings, offer))}")
    return 0
