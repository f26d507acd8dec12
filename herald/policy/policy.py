"""The policy every tool call passes at the Dispatcher, direct or from a script: one `Gate.check`.

`Policy` is what a session chose: a profile, per-tool rules, extra workspace roots, the allowed
web domains and, optionally, an `approve(call) -> bool` callback for `ask` rules.

Profiles:
- `read-only`: no tool with `mutates` (execute_code aside: its script's calls are checked one by
  one); `terminal` only for command lines the read-only allow-list accepts (shell.py), a first
  filter with a clear message: the command then runs confined by the OS (every path read-only,
  no network; backends/base.py `run(read_only=True)`), and where the backend cannot confine it,
  it is refused. An `allow` rule lifts the allow-list, not the confinement; where there is none,
  the rule is the opt-in to running the command unconfined. File tools inside the workspace;
  web and browser as in workspace-write.
- `workspace-write` (default): file tools confined to the workspace roots (paths.py); web and
  browser never reach link-local or metadata addresses, and only `allowed_domains` when set.
- `full`: no confinement.

Masks, whatever the profile and rules, on the local backend: Herald's own files (config, data,
spill files for writing) and the credential stores the script's isolation hides are out of
reach of file tools; an entry of `policy.roots` inside a mask lifts it there (paths.py).

The check and the tool's work are two steps: the Gate gives each call its confinement (the
workspace and masks; the masks alone for a call the full profile or a rule lifted), and the
local backend applies it to the object it opens, after the call's locks are held
(_sandbox/toolcore/callroots.py): a link swapped in between leads nowhere.

Which calls are file, command or web calls is read from the tool, not its name: the files it
`touches` (or a `path` argument), the shell it touches (with a `command` argument), its `url` /
`urls` arguments. Rules (rules.py) decide first: deny, then ask, then allow. A call that no rule
or profile check refuses passes with no record; refusals and approvals return a `Verdict` that
the Dispatcher writes to the transcript with the rule that decided it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._sandbox.toolcore.callroots import confine, masked_message
from ..backends.base import (
    CONFINE_PREFERRED,
    CONFINE_REQUIRED,
    call_cwd,
    confine_call,
    resolve_path,
)
from ..tools.resources import ANY_FILE, SHELL, Resource
from .domains import WebAddressPolicy, domain_matches, url_host
from .paths import Workspace
from .rules import Rule, command_matches, parse_rule, path_matches
from .shell import allowed_commands, readonly_refusal

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..config import Settings
    from ..tools.context import ToolContext
    from ..tools.registry import Tool

READ_ONLY, WORKSPACE_WRITE, FULL = "read-only", "workspace-write", "full"
PROFILES = (READ_ONLY, WORKSPACE_WRITE, FULL)


def _use(profile: str) -> str:
    return f"--profile {profile} (setting policy.profile)"


@dataclass(frozen=True)
class PolicyCall:
    """What an approver is asked about."""

    tool: str
    args: dict[str, Any]
    rule: str
    origin: str  # "direct" or "script"


Approver = Callable[[PolicyCall], bool]


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    decision: str  # refused | approved | denied
    rule: str
    message: str = ""


@dataclass(frozen=True)
class Policy:
    profile: str = WORKSPACE_WRITE
    rules: tuple[Rule, ...] = ()
    roots: tuple[str, ...] = ()
    allowed_domains: tuple[str, ...] = ()
    approve: Approver | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown permission profile {self.profile!r}: use one of {', '.join(PROFILES)}")

    @classmethod
    def from_settings(cls, settings: Settings, *, profile: str | None = None,
                      approve: Approver | None = None) -> Policy:
        """The policy the settings' `policy` section describes (ValueError names a bad rule)."""
        p = settings.policy
        return cls(profile or p.profile, tuple(parse_rule(r) for r in p.rules), tuple(p.roots),
                   tuple(p.allowed_domains), approve)

    @classmethod
    def coerce(cls, value: Policy | str | None, settings: Settings) -> Policy:
        """`Runtime(policy=...)`: a Policy as given, a profile name with the settings' rules, or
        the settings' policy."""
        if isinstance(value, Policy):
            return value
        return cls.from_settings(settings, profile=value)

    def describe(self, tools: Iterable[Tool], roots: Sequence[str]) -> str:
        """The profile in force and what it forbids, for the model and `herald tools`."""
        where = ", ".join(roots) or "the session's directory"
        if self.profile == FULL:
            text = "Permission profile: full (explicit opt-in): no path, command or domain confinement."
        else:
            text = f"Permission profile: {self.profile}. File tools only inside the workspace ({where})"
            if self.profile == READ_ONLY:
                refused = sorted(t.name for t in tools if t.mutates and not t.runs_scripts and not _is_shell(t))
                text += (
                    "; refused: tools that change anything" + (f" ({', '.join(refused)})" if refused else "") +
                    "; terminal runs only read-only commands (" + ", ".join(allowed_commands()) +
                    "; find without -exec/-delete; git status/diff/log/show/branch --list/...), with no "
                    "redirection except to /dev/null, no $(...), backticks, variables or background jobs; "
                    "each runs confined by the OS (every path read-only, no network), or is refused where the "
                    "backend cannot confine it"
                )
            text += "; web and browser never reach link-local or cloud metadata addresses"
            if self.allowed_domains:
                text += f", and only these domains: {', '.join(self.allowed_domains)}"
            text += "."
        text += (" On this machine file tools never touch Herald's own files or credential stores (~/.ssh, "
                 "~/.aws, ~/.netrc, ...), whatever the profile.")
        if self.rules:
            text += " Rules: " + "; ".join(str(r) for r in self.rules) + "."
        return text


def _is_shell(tool: Tool) -> bool:
    return tool.touches is not None and "command" in tool.properties and _touches_shell(tool)


def _touches_shell(tool: Tool) -> bool:
    try:
        return any(r.key == SHELL for r in tool.touches({}, None)) if tool.touches else False  # type: ignore[arg-type]  # probed, no context
    except Exception:
        return False


def _builtin(tool: Tool) -> bool:
    # The MCP client is a tool family under tools/, but its tools are the servers'.
    module = str(getattr(tool.handler, "__module__", ""))
    return module.startswith("herald.tools.") and not module.startswith("herald.tools.mcp.")


def _urls(args: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for key in ("url", "urls"):
        value = args.get(key)
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, str))
    return found


def _host(url: str) -> str:
    try:
        return url_host(url)[1]
    except ValueError:
        return ""  # not a URL: matches no domain (and _web refuses it)


class Gate:
    """A Policy applied to one session's backend; `check` once per call."""

    def __init__(self, policy: Policy, backend: Backend, read_roots: Sequence[str] = (),
                 own_files: Sequence[str] = ()) -> None:
        self.policy = policy
        self.read_roots = tuple(read_roots)  # also readable (Herald's spill files, on this machine)
        self.own_files = tuple(own_files)  # Herald's config and data (paths.herald_files): masked
        # Masks hold whatever the profile on this machine; on a remote one, under a confining profile.
        self._masks_always = backend.name == "local"
        self.backend = backend
        self._workspace: Workspace | None = None
        self._lock = threading.Lock()
        self._shell_tools: dict[str, bool] = {}
        # The one URL check, for the arguments here and every further hop in the tools.
        self._web_check = WebAddressPolicy(tuple(policy.allowed_domains))

    @property
    def workspace(self) -> Workspace:
        """Made on first use: the roots are where the session starts (the backend's cwd)."""
        if self._workspace is None:
            with self._lock:
                if self._workspace is None:
                    self._workspace = Workspace(self.backend, self.policy.roots, self.read_roots, self.own_files)
        return self._workspace

    def described_roots(self) -> tuple[str, ...]:
        """The roots for a description, without connecting a remote backend to learn its cwd
        (empty until the first call there)."""
        if self._workspace is None and self.backend.name != "local":
            return ()
        return self.workspace.roots

    @property
    def web_policy(self) -> WebAddressPolicy | None:
        """What web and browser tools check on each further hop (ToolContext.web_policy): the
        checks `_web` makes on their arguments; None in the full profile, which has none."""
        return None if self.policy.profile == FULL else self._web_check

    def _is_shell(self, tool: Tool) -> bool:
        known = self._shell_tools.get(tool.name)
        if known is None:
            known = self._shell_tools[tool.name] = _is_shell(tool)
        return known

    def _paths(self, tool: Tool, args: dict[str, Any], touches: list[Resource]) -> list[str]:
        """The paths a call names, as the tool will open them (absolute, `~` kept)."""
        # "Any file" says nothing about where (a tool that may touch anything, or arguments too
        # broken to tell): then only a `path` argument, if any, is checked.
        paths = [r.key[5:] for r in touches if r.key.startswith("file:") and r.key != ANY_FILE]
        named = args.get("path")
        # A built-in tool's `path` is a file here even when its locks do not say so
        # (browser_screenshot); another tool's (an MCP server's) may name anything.
        if not paths and isinstance(named, str) and named and "path" in tool.properties and _builtin(tool):
            paths.append(resolve_path(call_cwd(self.backend), named))
        return paths

    def check(self, tool: Tool, args: dict[str, Any], ctx: ToolContext, origin: str,
              touches: list[Resource] | None = None) -> Verdict | None:
        """None when the call may run without a record; else the verdict to log (and to refuse
        with unless `allowed`). `touches` is `tool.resources(args, ctx)` when the caller has it.
        The call's confinement is set for the backend to apply to what it opens (inside the
        Dispatcher's per-call scope): the workspace and masks, or for a call a rule or the full
        profile lifted, the masks alone."""
        if tool.runs_scripts:
            return None  # its script's calls come back through here one by one
        policy = self.policy
        if self._workspace is None and (policy.profile != FULL or policy.rules or self._masks_always):
            # Fixed by the session's first call, before any `cd` could move the shell.
            _ = self.workspace
        verdict = self._check(tool, args, ctx, origin, touches)
        workspace = self._workspace
        if workspace is not None and (verdict is None or verdict.allowed):
            lifted = policy.profile == FULL or verdict is not None
            if not lifted:
                confine(workspace.confined)
            elif self._masks_always:
                confine(workspace.masks_only)
        return verdict

    def _check(self, tool: Tool, args: dict[str, Any], ctx: ToolContext, origin: str,
               touches: list[Resource] | None) -> Verdict | None:
        policy = self.policy
        shell = self._is_shell(tool)
        command = args.get("command") if shell and isinstance(args.get("command"), str) else None
        paths = [] if shell else self._paths(tool, args, tool.resources(args, ctx) if touches is None else touches)
        located: dict[str, tuple[str, str | None]] = {}
        # Masks first: whatever the profile and rules, only policy.roots lifts one (paths.py).
        if paths and self._masks_always:  # each path resolved once, for the masks and the profile
            workspace, reading = self.workspace, not tool.mutates
            for path in paths:
                where = located[path] = workspace.locate(path, reading=reading)
                if where[1] is not None and workspace.masks_only.is_masked(where[1], not reading):
                    return Verdict(False, "refused", "masks: Herald's files and credential stores",
                                   f"{tool.name} refused: {masked_message(path, where[1])}")
        urls = _urls(args)
        lifted: Verdict | None = None
        if policy.rules:
            rule = self._rule(tool, command, paths, urls)
            if rule is not None:
                if rule.action == "deny":
                    return Verdict(False, "refused", f"policy.rules: {rule}",
                                   f"{tool.name} refused by the rule '{rule}' (policy.rules). Do this another "
                                   "way, or remove or narrow that rule in the config.")
                if rule.action == "ask":
                    verdict = self._ask(tool, args, rule, origin)
                    if not verdict.allowed:
                        return verdict
                    lifted = verdict
                else:
                    lifted = Verdict(True, "allowed", f"policy.rules: {rule}")
        if policy.profile == FULL:
            return lifted
        refusal = self._web(tool, urls)
        if refusal is not None:
            return refusal
        # Read-only: the allow-list below is a friendly first filter; the OS is the boundary: the
        # command runs confined read-only (tools/terminal.py), or is refused where the backend
        # cannot confine it, unless a rule or a person allowed it.
        if (policy.profile == READ_ONLY and command is not None
                and not confine_call(CONFINE_REQUIRED if lifted is None else CONFINE_PREFERRED)):
            return Verdict(False, "refused", "profile read-only",
                           f"{tool.name} refused by the read-only profile: this call has no scope to carry "
                           "its confinement (backends/base.py pinned_cwd), so it cannot be confined.")
        if lifted is not None:
            return lifted
        return self._profile(tool, command, paths, located)

    def _rule(self, tool: Tool, command: str | None, paths: list[str], urls: list[str]) -> Rule | None:
        matched: dict[str, Rule] = {}
        for rule in self.policy.rules:
            if rule.action in matched or not rule.covers_tool(tool.name):
                continue
            if rule.kind == "path":
                roots = self.workspace.roots
                resolved = [self.workspace.resolve(p) or p for p in paths]
                hit = bool(resolved) and (any if rule.action != "allow" else all)(
                    path_matches(rule, r, roots) for r in resolved)
            elif rule.kind == "command":
                hit = command is not None and command_matches(rule, command)
            elif rule.kind == "domain":
                hosts = [_host(u) for u in urls]
                hit = bool(hosts) and (any if rule.action != "allow" else all)(
                    domain_matches(h, rule.values) for h in hosts)
            else:
                hit = True
            if hit:
                matched[rule.action] = rule
        for action in ("deny", "ask", "allow"):
            if action in matched:
                return matched[action]
        return None

    def _ask(self, tool: Tool, args: dict[str, Any], rule: Rule, origin: str) -> Verdict:
        approve = self.policy.approve
        where = f"policy.rules: {rule}"
        allow = f"'allow{str(rule)[3:]}'"
        if approve is None:
            return Verdict(False, "refused", where,
                           f"{tool.name} needs approval (rule '{rule}' in policy.rules) and there is no way to ask "
                           f"here (no terminal, no approve callback). To allow such calls, change the rule to {allow}; "
                           "to stop asking for this tool, remove the rule.")
        try:
            approved = bool(approve(PolicyCall(tool.name, dict(args), str(rule), origin)))
        except Exception as exc:
            return Verdict(False, "refused", where, f"{tool.name} needs approval (rule '{rule}') and the approver "
                                                    f"failed: {type(exc).__name__}: {exc}. Not run.")
        if approved:
            return Verdict(True, "approved", where)
        return Verdict(False, "denied", where, f"{tool.name} was not approved (rule '{rule}'): do not retry it; "
                                               "ask the user or do something else.")

    def _web(self, tool: Tool, urls: list[str]) -> Verdict | None:
        for url in urls:
            refused = self._web_check.refusal(url)
            if refused is None:
                continue
            if refused.rule == "web addresses":
                advice = f"Use an http:// or https:// URL (local files: read_file), or {_use(FULL)}."
                rule = f"profile {self.policy.profile}: web addresses"
            elif refused.rule == "metadata addresses":
                advice, rule = f"({_use(FULL)} lifts this.)", refused.rule
            else:
                advice, rule = "Use one of those sites, or add the domain to policy.allowed_domains.", refused.rule
            by = f" by the {self.policy.profile} profile" if refused.rule == "web addresses" else ""
            return Verdict(False, "refused", rule, f"{tool.name} refused{by}: {refused.reason}. {advice}")
        return None

    def _profile(self, tool: Tool, command: str | None, paths: list[str],
                 located: dict[str, tuple[str, str | None]]) -> Verdict | None:
        profile = self.policy.profile
        if profile == READ_ONLY and tool.mutates:
            if command is not None:
                reason = readonly_refusal(command)
                if reason is not None:
                    first = command.split()[0] if command.split() else "COMMAND"
                    return Verdict(False, "refused", "profile read-only: terminal allow-list",
                                   f"terminal refused by the read-only profile: {reason}. Read-only commands: "
                                   f"{', '.join(allowed_commands())} (one per pipe stage). To run it, use "
                                   f"{_use(WORKSPACE_WRITE)}, or add a rule such as 'allow {tool.name} "
                                   f"command={first}' to policy.rules.")
            else:
                return Verdict(False, "refused", "profile read-only",
                               f"{tool.name} refused by the read-only profile: it changes files or state. Report "
                               f"what you would change instead, or use {_use(WORKSPACE_WRITE)}, or add a "
                               f"rule 'allow {tool.name}' to policy.rules.")
        workspace = self.workspace if paths else None
        for path in paths:
            assert workspace is not None
            outside = workspace.outside(path, reading=not tool.mutates, located=located.get(path))
            if outside is not None:
                where = path if outside == path else f"{path} leads to {outside}, which is"
                return Verdict(False, "refused", f"profile {profile}: workspace roots",
                               f"{tool.name} refused by the {profile} profile: {where} outside the workspace "
                               f"({', '.join(workspace.roots)}). Use a path inside it, add a directory to "
                               f"policy.roots, or use {_use(FULL)}.")
        return None
