"""Per-tool rules from `policy.rules`: allow, deny or ask, for a tool (or a glob of tool names),
optionally narrowed by one argument pattern.

    "deny write_file path=*.lock|secrets/**"    a path glob (search_files' glob rules; a glob
                                                 starting with / is absolute, else relative to
                                                 the workspace)
    "allow terminal command=make test|pytest"    command prefixes, by words (`make test` covers
                                                 `make test -k x`, not `make tester`)
    "ask browser_* domain=github.com"            a domain list (subdomains included)
    "deny web_*"                                 every call of those tools

A call's rules decide in the order deny, ask, allow, whatever order they were written in. An
`allow` lifts the profile's refusal of what it matches (never the metadata-address block); a
`deny` or `ask` applies on top of any profile. A command rule looks at every command of the line
(`ls; rm x` is two): deny and ask match when any command has the prefix, or when the line hides
commands the rule cannot see ($(...), backticks, variables); allow matches only when every
command has one of its prefixes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Literal

from .._sandbox.search.globs import GlobError, compile_glob
from .shell import split_commands

Action = Literal["allow", "deny", "ask"]
ACTIONS: tuple[Action, ...] = ("deny", "ask", "allow")
KINDS = ("path", "command", "domain")


class RuleError(ValueError):
    """A rule that cannot be read; the message shows the rule and the expected form."""


@dataclass(frozen=True)
class Rule:
    action: Action
    tools: str  # a tool name or a glob of names (`browser_*`, `*`)
    kind: str = ""  # "" (every call) | path | command | domain
    values: tuple[str, ...] = ()
    text: str = ""

    def covers_tool(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.tools)

    def __str__(self) -> str:
        return self.text or f"{self.action} {self.tools}" + (
            f" {self.kind}={'|'.join(self.values)}" if self.kind else ""
        )


def parse_rule(text: str) -> Rule:
    """`ACTION TOOL [KIND=VALUE|VALUE...]` (see the module docstring); RuleError otherwise."""
    form = (
        "expected 'allow|deny|ask TOOL [path=GLOB|command=PREFIX|domain=NAME]', e.g. 'deny terminal command=git push'"
    )
    words = text.strip().split(None, 2)
    if len(words) < 2 or words[0] not in ACTIONS:
        raise RuleError(f"policy rule {text!r}: {form}")
    action, tools = words[0], words[1]
    if len(words) == 2:
        return Rule(action, tools, text=text.strip())
    kind, sep, raw = words[2].partition("=")
    if not sep or kind not in KINDS:
        raise RuleError(f"policy rule {text!r}: {form}")
    values = tuple(v.strip() for v in raw.split("|") if v.strip())
    if not values:
        raise RuleError(f"policy rule {text!r}: {kind}= needs at least one value; {form}")
    if kind == "path":
        for value in values:
            try:
                compile_glob(value)
            except GlobError as exc:
                raise RuleError(f"policy rule {text!r}: bad path glob {value!r}: {exc}") from None
    return Rule(action, tools, kind, values, text.strip())


def path_matches(rule: Rule, resolved: str, roots: tuple[str, ...]) -> bool:
    relative = None
    for root in roots:
        prefix = root.rstrip("/") + "/"
        if resolved.startswith(prefix):
            relative = resolved[len(prefix):]
            break
    for value in rule.values:
        glob = compile_glob(value)
        if value.startswith("/"):
            if glob.matches(resolved.lstrip("/")):
                return True
        elif relative is not None and glob.matches(relative):
            return True
    return False


def command_matches(rule: Rule, command: str) -> bool:
    commands = split_commands(command)
    prefixes = [v.split() for v in rule.values]

    def covered(words: list[str]) -> bool:
        return any(words[: len(p)] == p for p in prefixes)

    if commands is None:  # the line hides commands: a deny or ask must assume the worst
        return rule.action != "allow"
    if rule.action == "allow":
        return bool(commands) and all(covered(c) for c in commands)
    return any(covered(c) for c in commands)
