"""One tool call in -> policy -> tool -> result: `Dispatcher.handle(ToolCall) -> CallOutcome`
(calls.py), the one path of a model's direct calls, a script's calls and the records of calls
answered next to the script. The wire is the RPC layer's (rpc/replies.py): a script call comes
with the encoder of its reply frame, which the Dispatcher asks for the size of what is sent.

Policy, in order:
1. The tool must be in the run's allow-list: sandbox tools ∩ the session's enabled tools.
   An unknown name and a known-but-excluded tool get different messages, both listing what the
   script may call.
2. Arguments are checked against the tool's schema; arguments refused inside scripts (terminal's
   `background`, `pty`, ...) are rejected with the reason.
3. The run's call budget: calls past `max_tool_calls` get an error the script can handle; the
   script keeps running. So do calls past one of the run's other budgets (`CallScope.budgets`:
   reply bytes, tool seconds, web calls, browser actions, bytes written; policy/budgets.py).
   Then the permission policy (`Gate.check`, herald/policy/), for direct and script calls
   alike: the profile, per-tool rules, path confinement; a refusal is a `PolicyRefused` error
   and a `policy` transcript record with the rule that decided. A `timeout` argument is cut to
   the time the run has left, so no
   command outlives the run that started it (and holds up the next one).
4. The tool runs. Calls run concurrently on the RPC server's threads; a call first takes a lock
   on each resource it touches (`Tool.touches`: a file, the shell, the browser, tool-wide state;
   tools/resources.py), so two patches of one file take turns while other calls go on.
5. Every call is logged to the transcript (tool, args preview, duration, result size, error),
   never to the model's context.
A direct call (the model's; `call_direct`) may call any enabled tool, with the same argument
binding (without the script-only refusals), lock, error mapping and logging, no budget.
It also runs execute_code, which the Runtime adds (`add_direct`): a tool that runs scripts
(`Tool.runs_scripts`) holds no locks, since its script's calls come back here and take their own.
A record (a call answered next to the script) is counted in its run and logged, nothing run.
A script's transaction requests (TRANSACTION_CALL, not a tool) go to `transactions`, uncounted.
Errors are data: `{"error": {"type", "message"}}`, never an exception out of `handle`.

Which tools a session offers at all is decided once, by `offer_tools` (offer.py).

Cancellation: a call may carry a `threading.Event` (`call_direct(cancel=...)`, or a scope's
`cancel`). Once it is set, a call not yet started is refused and a running one is asked to stop:
the handler runs inside `cancellable(event)`, which the persistent shell (so `terminal` on every
backend) honours by killing the command's tree at once; other tools may poll `current_cancel()`.

Deadlines: a script's call runs under `call_deadline(scope.live_deadline)` (herald/deadlines.py),
the run's deadline moved on while a person is asked to approve one of its calls. Its wait for
locks ends there, it checks cancel and deadline again once it holds them (a call of an ended
run must not act), and tools that wait ask `time_left()`. `CallScope.stop` (the run is over)
cancels the calls still running and waits, briefly, for every one to have returned.

Memory: a script call's handler runs under `charged_inflight(scope.inflight)`: what a tool loads
(`inflight.hold_bytes`) counts against the run's cap on bytes in flight until the call ends.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from .._sandbox.toolcore.callroots import confined_call
from .._sandbox.wire.frames import TRANSACTION_CALL
from ..backends.base import BackendError, pinned_cwd
from ..backends.shell import CANCEL_POLL_SECONDS, cancellable, foreground_only
from ..config import herald_files
from ..deadlines import DeadlinePassed, call_deadline, check_deadline, time_left
from ..inflight import InflightBytes, charged_inflight
from ..policy import Gate, Policy
from ..policy.budgets import Budgets
from ..spill import SpillBudget, charged_to
from ..tools.arguments import bind_arguments
from ..tools.context import ToolContext
from ..tools.missing import missing_dependency
from ..tools.registry import Registry, Tool, ToolError
from ..tools.resources import KeyedLocks, Resource
from ..transcript import Transcript
from .calllog import CallLog, script_fields
from .calls import CallOutcome, CallTap, ToolCall, direct_call, error
from .offer import ToolWarmer, offer_tools
from .rpc.replies import MEASURED
from .scope import REFUSALS, CallScope
from .transactions import Transactions

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(
        self,
        registry: Registry,
        ctx: ToolContext,
        *,
        enabled: list[str] | None = None,
        transcript: Transcript | None = None,
        policy: Policy | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy or Policy.from_settings(ctx.settings)
        self.gate = Gate(self.policy, ctx.backend, read_roots=[str(ctx.settings.spill_dir)],
                         own_files=herald_files(ctx.settings))
        self.ctx = ctx
        ctx.web_policy = self.gate.web_policy  # the same URL checks on every hop a web tool takes
        self.transcript = transcript
        self.log = CallLog(transcript)
        self.offer = offer_tools(registry, enabled, ctx.settings)
        self.tools: list[Tool] = self.offer.tools  # what a model may call directly (execute_code aside)
        self.script_tools: list[Tool] = self.offer.script_tools
        self._allowed = {t.name: t for t in self.script_tools}
        self._offered = {t.name: t for t in self.tools}
        self._locks = KeyedLocks()
        self._ids = itertools.count(1)
        # The offered tools' warm-ups (a browser launched ahead of its first call): offer.py.
        self.warmer = ToolWarmer(ctx, self.tools, ctx.settings.sandbox.warm_tools)
        self.warmer.session_started(enabled)
        # Called after each script call with (tool name, its error type or None): live progress
        # for a UI, which can tell refused calls (scope.REFUSALS) from failed ones.
        self.on_script_call: Callable[[str, str | None], None] | None = None
        # Record and replay (runtime/replay/): sees every call; in a replay, answers the script's.
        self.tap: CallTap | None = None
        # A script's `transaction()` blocks (transactions.py): its begin and end come here.
        self.transactions = Transactions(self.handle, ctx, self.gate, transcript)

    def add_direct(self, tool: Tool) -> None:
        """Offer `tool` to direct calls too: a tool made after this dispatcher, such as the
        owning Runtime's execute_code. It is not added to `tools` (the registry's offer)."""
        if tool.name in self._offered or tool.name in self.registry:
            raise ValueError(f"a tool named {tool.name!r} is already offered")
        if tool.sandbox:
            raise ValueError(f"tool {tool.name}: only direct-call tools can be added after the offer")
        self._offered[tool.name] = tool

    def new_scope(self, max_calls: int, deadline: float | None = None,
                  budgets: Mapping[str, float] | None = None) -> CallScope:
        limits = self.ctx.settings.sandbox
        return CallScope(run_id=f"run-{next(self._ids)}", max_calls=max_calls, deadline=deadline,
                         spill=SpillBudget(limits.max_spill_bytes), budgets=Budgets(budgets) if budgets else None,
                         inflight=InflightBytes(limits.max_inflight_bytes))

    def _available(self) -> str:
        return ", ".join(sorted(self._allowed)) or "none"

    def _refuse(self, name: Any) -> CallOutcome:
        if not isinstance(name, str) or not name:
            message = f"A tool call must name a tool. Available in this script: {self._available()}."
            return error("UnknownTool", message)
        known = self._offered.get(name) or self.registry.get(name)
        if known is not None and known.runs_scripts:
            message = f"{name} cannot be called from inside a script (no nested sandboxes)."
        elif name in self.offer.withheld:
            message = f"Tool '{name}' is not available in this session: {self.offer.withheld[name]}."
        elif name in self.registry and name not in self._offered:
            message = f"Tool '{name}' is not enabled in this session."
        elif name in self.registry:
            message = (
                f"Tool '{name}' is not available inside execute_code; call it directly as a normal "
                "tool call instead."
            )
        else:
            message = f"Unknown tool: '{name}'."
        return error(
            "UnknownTool" if known is None else "ToolNotAvailable",
            f"{message} Available in this script: {self._available()}.",
        )

    def handle(self, call: ToolCall) -> CallOutcome:
        """The one path of every tool call (calls.py: direct, script, record): allow-list,
        argument checks, policy, budgets, locks, the tool, the transcript. Errors are outcomes,
        never exceptions (only a record call made without its scope raises: a bug in Herald).
        A script call's reply is sized through its `wire`: what is sent."""
        if call.who == "record":
            return self._recorded(call)
        started = time.perf_counter()
        scope = call.scope if call.who == "script" else None
        offer = self._offered if scope is None else self._allowed
        tool = offer.get(call.name) if isinstance(call.name, str) else None
        if scope is None:
            return self._direct(call, tool, started)
        served = self.tap.answer(call) if self.tap is not None else None
        if tool is None and call.name == TRANSACTION_CALL:  # not a tool: uncounted, logged there
            outcome = served if served is not None else self.transactions.serve(scope, call.args)
            _size(call, outcome)
            if self.tap is not None:  # recorded whole: its verify is part of it (ToolCall.inner)
                self.tap.seen(call, outcome)
            return outcome
        if served is not None:  # a replay: the recorded outcome, counted in the run as it was
            outcome = served
            if scope.take(call.past_budget):
                scope.done()
        elif tool is None:
            outcome = self._refuse(call.name)
        elif not scope.take(call.past_budget):
            outcome = error(
                "ToolCallLimit",
                f"Tool call limit reached: this script already made its {scope.max_calls} allowed "
                "tool calls, so this call was not run. Print what you have and finish, or do the "
                "rest in another execute_code run.",
            )
        else:
            try:  # taken: it counts as running until done
                if scope.budgets is not None and (exhausted := scope.budgets.before(tool, call.args)) is not None:
                    outcome = error("BudgetExhausted", exhausted)
                else:
                    outcome = self._with_backend_note(self._run(tool, call.args, scope, scope.cancel, scope.run_id))
            finally:
                scope.done()
        size = _size(call, outcome)
        if tool is not None and served is None and scope.budgets is not None and "error" not in outcome:
            over = scope.budgets.after(time.perf_counter() - started, size)
            if over is not None:
                outcome = error("BudgetExhausted", over)
                size = _size(call, outcome)
        kind = outcome["error"]["type"] if "error" in outcome else None
        if tool is not None and kind in REFUSALS and kind != "ToolCallLimit":  # that one: `scope.take`
            scope.count_refusal(kind)
        if self.tap is not None:
            self.tap.seen(call, outcome)
        self.log.call(scope.run_id, "sandbox_tool_call", call.name, call.args, outcome, size,
                  time.perf_counter() - started)
        if self.on_script_call is not None:
            self._tell(str(call.name), kind)
        return outcome

    def _direct(self, call: ToolCall, tool: Tool | None, started: float) -> CallOutcome:
        if self.tap is not None and tool is not None:
            self.tap.starting(call)
        outcome = self._unknown(call.name) if tool is None else self._with_backend_note(
            self._run(tool, call.args, None, call.cancel, call.id))
        if self.tap is not None:
            self.tap.seen(call, outcome)
        if self.transcript is not None:
            self.log.call(call.id, "tool_call", call.name, call.args, outcome, _size(call, outcome),
                      time.perf_counter() - started, script_fields(tool, outcome))
        return outcome

    def _recorded(self, call: ToolCall) -> CallOutcome:
        """A call answered next to the script (runtime/backend_tools.py): by a backend-mode
        supervisor (the record says `in_backend`), or by a host-mode script's own process
        (`in_script`). Counted in its run and logged as the calls Herald runs are."""
        answered, scope = call.answered, call.scope
        if answered is None or scope is None:
            raise ValueError("a record call needs its run's scope and what was answered")
        scope.budget.count()
        outcome: CallOutcome = {"error": answered.error} if answered.error is not None else {}
        where = {"in_script": True} if answered.in_script else {"in_backend": True}
        self.log.call(call.id, "sandbox_tool_call", call.name, call.args, outcome, answered.reply_bytes,
                  answered.seconds, where, previewed=answered.previewed)
        self._tell(str(call.name), None if answered.error is None else str(answered.error.get("type", "ToolError")))
        return outcome

    def _tell(self, name: str, kind: str | None) -> None:
        if self.on_script_call is not None:
            try:
                self.on_script_call(name, kind)
            except Exception:  # a display problem must not fail the script's call
                log.exception("on_script_call hook failed")

    def _unknown(self, name: Any) -> CallOutcome:
        """A direct call of a tool the session does not offer."""
        # The session's enabled tools: what `enabled` chose (tools added later are always there).
        known = ", ".join(sorted(t.name for t in self.tools)) or "none"
        if name in self.offer.withheld:
            message = f"Tool '{name}' is not available in this session: {self.offer.withheld[name]}."
        elif name in self.registry:
            message = f"Tool '{name}' is not enabled in this session."
        else:
            message = f"Unknown tool: '{name}'."
        return error("UnknownTool", f"{message} Enabled tools: {known}.")

    def call_direct(
        self, name: str, args: Any, *, call_id: str = "direct", cancel: threading.Event | None = None
    ) -> dict[str, Any]:
        """A model's direct tool call (`handle`); setting `cancel` (from any thread) stops it.
        The outcome as the plain dict its callers (the agent, the MCP server, tests) read freely."""
        return cast("dict[str, Any]", self.handle(direct_call(name, args, call_id, cancel, MEASURED)))

    def resources(self, name: str, args: Any) -> list[Resource]:
        """What a call of tool `name` with `args` would touch (for callers that order calls, such
        as the agent's concurrent direct calls); an unknown tool touches nothing."""
        tool = self._offered.get(name)
        if tool is None or not isinstance(args, dict):
            return []
        return tool.resources(args, self.ctx)

    def _run(
        self, tool: Tool, args: Any, scope: CallScope | None, cancel: threading.Event | None, run_id: str
    ) -> CallOutcome:
        # Relative paths lead from one place for the check and the work alike (backends/base.py
        # call_cwd): a `cd` running beside this call cannot move it in between.
        # The Gate sets the call's confinement, which the local backend checks on what it opens.
        with pinned_cwd(), confined_call():
            return self._run_pinned(tool, args, scope, cancel, run_id)

    def _run_pinned(
        self, tool: Tool, args: Any, scope: CallScope | None, cancel: threading.Event | None, run_id: str
    ) -> CallOutcome:
        try:
            bound = bind_arguments(tool, args, in_script=scope is not None)
            # A script's calls come back here and lock what each touches: holding all the script
            # may touch for the whole run would make them wait for ever.
            resources = [] if tool.runs_scripts else tool.resources(bound, self.ctx)
            # The one policy check, the same for direct and script calls (herald/policy/).
            verdict = self.gate.check(tool, bound, self.ctx, "direct" if scope is None else "script", resources)
            if verdict is not None:
                self.log.policy(run_id, tool.name, bound, verdict, self.policy.profile)
                if not verdict.allowed:
                    return {"error": {"type": "PolicyRefused", "message": verdict.message, "rule": verdict.rule}}
            if cancel is not None and cancel.is_set():
                return _interrupted(tool)
            # Waiting for what another call holds ends at the run's deadline or its cancel.
            with (call_deadline(scope.live_deadline if scope is not None else None),
                  self._locks.hold(resources, cancel, CANCEL_POLL_SECONDS) as held):
                # Checked again once held: the run may have ended while this call waited, and
                # a call of an ended run must not act (Runtime.execute has returned).
                if cancel is not None and cancel.is_set():
                    return _interrupted(tool)
                check_deadline(f"{tool.name} (it waited for another call to free what it touches)")
                if not held:
                    return _interrupted(tool)
                if scope is not None and "timeout" in tool.properties:
                    _cut_timeout(bound, self.ctx.settings.terminal.timeout)
                # A script's commands end with their background jobs (shell.foreground_only).
                with (cancellable(cancel), foreground_only(scope is not None),
                      charged_to(scope.spill if scope is not None else None),
                      charged_inflight(scope.inflight if scope is not None else None),
                      self.transactions.writing(scope, resources) if tool.mutates else contextlib.nullcontext()):
                    result = tool.handler(bound, self.ctx)
        except ToolError as exc:
            return error(exc.error_type, str(exc))
        except DeadlinePassed as exc:
            return error("Timeout", f"{tool.name} stopped: {exc}. Print what you have; the run is ending.")
        except FileNotFoundError as exc:
            return error("FileNotFound", f"{tool.name}: no such file or directory: {exc.filename}")
        except PermissionError as exc:
            return error("PermissionDenied", f"{tool.name}: permission denied: {exc.filename}")
        except OSError as exc:
            return error("OSError", f"{tool.name}: {exc}")
        except BackendError as exc:
            return error("BackendError", f"{tool.name}: the {self.ctx.backend.name} backend failed: {exc}")
        except ImportError as exc:  # an optional extra is not installed (ModuleNotFoundError too)
            return error("MissingDependency", missing_dependency(tool.name, exc))
        except Exception as exc:
            return error("InternalError", f"{tool.name} failed unexpectedly: {type(exc).__name__}: {exc}")
        return {"result": result}

    def _with_backend_note(self, reply: CallOutcome) -> CallOutcome:
        """Add what the backend had to do since the last call (e.g. reconnect) to this reply."""
        result = reply.get("result")
        if not (isinstance(result, dict) or "error" in reply):
            return reply
        note = self.ctx.backend.take_note()
        if note and isinstance(result, dict):
            result["note"] = f"{note} {result['note']}" if result.get("note") else note
        elif note:
            reply["error"]["message"] += f" Note: {note}"
        return reply

def _cut_timeout(bound: dict[str, Any], default: float) -> None:
    """A `timeout` argument cut to what the run has left (None means the configured one), so no
    command outlives the run that started it (and holds up the next one)."""
    limit = bound.get("timeout")
    bound["timeout"] = time_left(default if limit is None else limit)


def _interrupted(tool: Tool) -> CallOutcome:
    return error("Interrupted", f"{tool.name}: not run: the run was interrupted or ended before it started.")


def _size(call: ToolCall, outcome: CallOutcome) -> int:
    """The bytes `outcome` takes as its caller's wire carries it (0 without one)."""
    return call.wire.size(outcome) if call.wire is not None else 0
