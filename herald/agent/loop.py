"""`Agent`: the model loop around Herald's tools.

Loop policy (one `run(task)`):
1. The task is appended to the history as a user message. The system prompt was built once when
   the session started (from the registry: execute_code's description lists the real stubs) and
   is never changed, so prompt caches stay valid.
2. Each turn charges the iteration budget (`agent.max_turns`, default 90) and makes one model
   call (interruptible; retried, failed over and compressed as `modelcall` describes). Before
   the call, a history past `compress_at` of the context window is compressed.
3. A reply with tool calls: the calls' JSON is repaired, the assistant message is stored with the
   repaired arguments, the calls run (concurrently when safe; see `toolexec`), their results are
   appended in call order. A turn whose only call was execute_code is refunded. Next turn.
4. A reply without tool calls is the final answer and ends the run (an empty one is nudged once).
5. Budget used up: one note and one grace call; if that still calls tools, they are not run and
   a last call with tools disabled asks for a summary; if even that fails, Herald writes the
   summary itself. A run always ends with text.
6. `interrupt()` (any thread) abandons the model call in flight, kills a running script and
   cancels a running direct tool call (a terminal command is killed with its process tree); the
   run returns at once with status "interrupted", and the history stays valid for a resume.
Everything (messages, tool calls, inner script calls, usage, timings) goes to the session's
JSONL transcript.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from ..backends.base import Backend
from ..config import Settings, load_settings
from ..keys import herald_environ
from ..policy import READ_ONLY, Policy
from ..runtime import Runtime
from ..runtime.replay import RECORDING_SETTINGS, SessionRecorder
from ..runtime.toolset import default_registry
from ..tools.registry import Registry
from .budget import IterationBudget
from .compression import compress, estimate_tokens
from .events import (
    AgentEvent,
    AgentResult,
    ModelCallFinished,
    ModelCallStarted,
    Notice,
    Status,
    ToolCallRecord,
)
from .guardrails import LoopGuard
from .history import close_dangling_calls, is_final
from .modelcall import ModelCaller, ModelCallFailed, failure_text
from .prompts import plan_note, system_prompt
from .providers.base import (
    Message,
    ModelCallCancelled,
    ModelRequest,
    ModelResponse,
    ProviderConfig,
    Usage,
)
from .providers.errors import ClassifiedError
from .providers.resolve import resolve_fallbacks, resolve_primary
from .sessions import Session, SessionState, find_session, new_session_id, read_session
from .todo import TodoList, todo_tool
from .toolexec import ToolExecutor

BUDGET_NOTE = (
    "[Herald: the turn budget for this task is used up ({used} turns). Reply now with your final "
    "answer as plain text: what you did, what you found, what is left. Tool calls will not run.]"
)
SUMMARY_REQUEST = (
    "[Herald: you have reached the turn limit and tools are disabled. Summarize what you "
    "accomplished and what remains, as plain text.]"
)
EMPTY_NUDGE = "[Herald: your last reply was empty. Give your final answer as text, or call a tool.]"


class Agent:
    """A session: one history, one backend, one Runtime, one provider chain.

    `run(task)` may be called again with a follow-up; `Agent(session=ID)` resumes a saved
    session. Use as a context manager (or call `close()`).
    """

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        provider: str | None = None,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_mode: str | None = None,
        fallback: Sequence[str] | None = None,
        max_turns: int | None = None,
        backend: Backend | str | None = None,
        cwd: str | None = None,
        tools: Iterable[str] | None = None,
        registry: Registry | None = None,
        session: str | None = None,
        on_event: Callable[[AgentEvent], None] | None = None,
        env: Mapping[str, str] | None = None,
        policy: Policy | str | None = None,
        plan: bool = False,
    ) -> None:
        """`plan=True`: plan mode (read-only profile, the answer is a plan; see prompts.PLAN_MODE).
        A session started in plan mode and resumed without it is told the plan was approved."""
        base = settings or load_settings()
        overrides = {"agent.provider": provider, "agent.model": model, "agent.base_url": base_url,
                     "agent.api_key": api_key, "agent.api_mode": api_mode, "agent.max_turns": max_turns,
                     "agent.fallback": list(fallback) if fallback is not None else None}
        self.settings = base.with_overrides(overrides)
        if self.settings.agent.record_runs:  # every result must reach Herald to be recorded
            self.settings = self.settings.with_overrides(RECORDING_SETTINGS)
        env = herald_environ() if env is None else env
        agent = self.settings.agent
        state: SessionState | None = None
        if session is not None:  # first: a wrong id is the error to report, not a missing key
            state = read_session(find_session(self.settings.sessions_dir, session))
        chain: list[ProviderConfig] = [resolve_primary(agent, env), *resolve_fallbacks(agent, env)]
        self._on_event = on_event
        # Set by interrupt(): stops the model call, a running script, and a running direct tool
        # call (the dispatcher hands it to the tool as its cancel event).
        self._interrupted = threading.Event()
        self._run_lock = threading.Lock()
        self._usage, self._turns = Usage(), 0  # of the current run
        self._calls: list[ToolCallRecord] = []
        self.todo = TodoList(state.todos if state else None)
        # A constructor that fails half-way must not leave a shell, a sandbox or an empty session file.
        with contextlib.ExitStack() as undo:
            self._own_backend = not isinstance(backend, Backend)
            # The spec is saved with the session so that a resume opens the same kind of backend.
            backend_spec = _backend_spec(backend, self.settings.backend)
            if isinstance(backend, Backend):
                self.backend = backend
            else:
                from ..backends.factory import open_backend

                self.backend = open_backend(backend or self.settings.backend, settings=self.settings, cwd=cwd)
                undo.callback(self.backend.close)
            self.session = Session(self.settings.sessions_dir, state.id if state else new_session_id())
            undo.callback(self.session.close)
            if state is None:
                undo.callback(self.session.path.unlink, missing_ok=True)
            if plan:
                policy = dataclasses.replace(Policy.coerce(policy, self.settings), profile=READ_ONLY)
            tools_registry = Registry([*(registry or default_registry(self.settings)), todo_tool(self.todo)])
            enabled = list(tools) if tools is not None else self.settings.tools
            if enabled is not None:
                enabled = [*enabled, "todo"]
            self.runtime = Runtime(
                self.backend, settings=self.settings, tools=enabled, registry=tools_registry,
                transcript=self.session.transcript, policy=policy, checkpoint_session=self.session.id,
            )
            undo.callback(self.runtime.close)
            if self.settings.agent.record_runs:  # for `herald replay SESSION --run N`
                self.runtime.dispatcher.tap = SessionRecorder(
                    self.settings.sessions_dir, self.session.id, self.session.record,
                    backend=backend_spec or self.backend.name, exec_mode=self.runtime.exec_mode,
                    tools=[t.name for t in self.runtime.dispatcher.script_tools],
                    max_tool_calls=self.settings.sandbox.max_tool_calls)
            # Chromium, web workers: ahead of the model's first call
            self.runtime.dispatcher.warmer.model_session_started()
            direct_tools = self.runtime.dispatcher.tools  # without tools that cannot work here
            execute_tool = self.runtime.execute_tool  # runs scripts on this session's Runtime
            self.tool_schemas = [execute_tool.llm_schema(), *(t.llm_schema() for t in direct_tools)]
            if state is not None and isinstance(state.meta.get("system"), str):
                self.system = state.meta["system"]  # the session's prompt, byte for byte
            else:
                self.system = system_prompt(backend_name=self.backend.name, cwd=self.backend.cwd,
                                            direct_tools=direct_tools, settings=self.settings, plan=plan)
            # A note for the next task when plan mode starts or ends on a resumed session.
            self._plan_note = plan_note(state, plan, self.runtime.dispatcher.policy.profile)
            self.messages: list[Message] = close_dangling_calls(state.messages if state else [])
            self.caller = ModelCaller(chain, agent, emit=self._emit, record=self.session.record)
            self.executor = ToolExecutor(
                runtime=self.runtime, tools=[execute_tool, *direct_tools], settings=self.settings,
                guard=LoopGuard(warn_after=agent.guard_warn_after, block_after=agent.guard_block_after),
                emit=self._emit, record=self.session.record, cancel=self._interrupted,
            )
            head = {"provider": chain[0].provider, "model": chain[0].model, "api_mode": chain[0].api_mode,
                    "base_url": chain[0].base_url, "backend": self.backend.name, "backend_spec": backend_spec,
                    "cwd": self.backend.cwd, "profile": self.runtime.dispatcher.policy.profile, "plan": plan}
            if state is None:
                self.session.record("session", id=self.session.id, **head, system=self.system,
                                    tools=[s["function"]["name"] for s in self.tool_schemas])
            else:
                self.session.record("resume", **head, messages=len(self.messages))
            undo.pop_all()

    @property
    def session_id(self) -> str:
        return self.session.id

    # -- the loop ----------------------------------------------------------------------------

    def run(self, task: str | None = None) -> AgentResult:
        with self._run_lock:
            self._interrupted.clear()
            self.caller.reset_interrupt()
            if not task and (not self.messages or is_final(self.messages[-1])):
                raise ValueError("nothing to continue: the session ended with an answer; pass a task")
            self.session.record("run_start", task=task or "(continue)")
            if task:
                note, self._plan_note = self._plan_note, ""
                self._add({"role": "user", "content": f"{note}\n\n{task}" if note else task})
            self._usage, self._turns, self._calls = Usage(), 0, []
            started = time.monotonic()
            budget = IterationBudget(self.settings.agent.max_turns)
            error: str | None = None
            try:
                status, final = self._loop(budget)
            except ModelCallCancelled:
                status, final = "interrupted", "Interrupted: the session was stopped before it finished."
            except ModelCallFailed as exc:
                status, final, error = "error", failure_text(exc.error), str(exc)
            except BaseException as exc:  # a bug or a dead backend: the transcript still says how it ended
                self.session.record("run_end", status="error", final="", turns=self._turns,
                                    usage=self._usage.to_dict(), error=f"{type(exc).__name__}: {exc}")
                self.session.transcript.flush()
                raise
            self.messages = close_dangling_calls(self.messages, record=self.session.message)
            seconds = time.monotonic() - started
            self.session.record("run_end", status=status, final=final, turns=self._turns,
                                usage=self._usage.to_dict(), seconds=round(seconds, 3), budget=budget.describe())
            self.session.transcript.flush()
            return AgentResult(final, status, self.session.id, list(self.messages), self._usage, self._turns,
                               list(self._calls), error, round(seconds, 3))

    def _loop(self, budget: IterationBudget) -> tuple[Status, str]:
        nudged = False
        while True:
            if self._interrupted.is_set():
                raise ModelCallCancelled()
            if not budget.consume():
                return "budget_exhausted", self._exhausted(budget)
            response = self._model_turn("auto")
            if response.tool_calls:
                self._run_tools(response)
                if len(response.tool_calls) == 1 and self.executor.refunds_turn(response.tool_calls[0].name):
                    budget.refund()
                continue
            self._add(response.as_message())
            if not response.text.strip() and not nudged:
                nudged = True
                self._add({"role": "user", "content": EMPTY_NUDGE})
                continue
            return "completed", response.text

    def _run_tools(self, response: ModelResponse, *, run: bool = True) -> None:
        prepared = self.executor.prepare(response.tool_calls)
        self._add({"role": "assistant", "content": response.text or None,
                   "tool_calls": [p.as_history() for p in prepared]})
        if run:
            outcomes = self.executor.execute(prepared)
            for outcome in outcomes:
                self._add(outcome.message)
                self._calls.append(outcome.record)
            if any(o.record.name == "todo" and o.record.ok for o in outcomes):
                self.session.record("todo", todos=self.todo.items)  # restored on resume
            return
        for p in prepared:
            self._add({"role": "tool", "tool_call_id": p.id, "is_error": True,
                       "content": "Not run: the turn budget is used up."})
            self._calls.append(ToolCallRecord(p.id, p.name, p.arguments, False, 0.0, blocked=True))

    def _exhausted(self, budget: IterationBudget) -> str:
        self._emit(Notice("budget", f"turn budget used up ({budget.describe()}); asking for a final answer"))
        self._add({"role": "user", "content": BUDGET_NOTE.format(used=budget.used)})
        try:
            response = self._model_turn("auto")  # the grace call
            if not response.tool_calls and response.text.strip():
                self._add(response.as_message())
                return response.text
            if response.tool_calls:
                self._run_tools(response, run=False)
            self._add({"role": "user", "content": SUMMARY_REQUEST})
            response = self._model_turn("none")
            if response.text.strip():
                self._add({"role": "assistant", "content": response.text})
                return response.text
        except ModelCallFailed as exc:
            self._emit(Notice("budget", f"the summary call failed ({exc}); Herald wrote the summary"))
        text = self._own_summary(budget)
        self._add({"role": "assistant", "content": text})
        return text

    def _own_summary(self, budget: IterationBudget) -> str:
        done = [f"{c.name} ({'ok' if c.ok else 'failed'})" for c in self._calls if not c.blocked]
        notes = [m["content"] for m in self.messages if m["role"] == "assistant" and m.get("content")]
        return (
            f"Stopped: the turn budget ran out ({budget.describe()}) before the model gave a final "
            f"answer. Tool calls made: {len(done)}" + (f" ({', '.join(done[-10:])})" if done else "") + "."
            + (f" Last note from the model: {notes[-1][:500]}" if notes else "")
        )

    # -- model calls -------------------------------------------------------------------------

    def _model_turn(self, tool_choice: Literal["auto", "none"]) -> ModelResponse:
        self._preflight()
        self._turns += 1
        config = self.caller.config
        self._emit(ModelCallStarted(self._turns, config.provider, config.model))
        started = time.monotonic()

        def build() -> ModelRequest:
            return ModelRequest(self.system, list(self.messages), self.tool_schemas, tool_choice)

        response = self.caller.call(build, self._compress_for)
        seconds = time.monotonic() - started
        self._usage.add(response.usage)
        config = self.caller.config
        self.session.record(
            "model_call",
            turn=self._turns,
            provider=config.provider,
            model=response.model or config.model,
            seconds=round(seconds, 3),
            usage=response.usage.to_dict(),
            stop_reason=response.stop_reason,
            tool_calls=len(response.tool_calls),
        )
        self._emit(ModelCallFinished(self._turns, response.usage, seconds, response.text, len(response.tool_calls)))
        return response

    def _context_tokens(self) -> int:
        return estimate_tokens(self.messages, self.system, str(self.tool_schemas))

    def _preflight(self) -> None:
        agent = self.settings.agent
        limit = int(agent.context_window * agent.compress_at)
        if self._context_tokens() > limit:
            self._compress(int(limit * 0.6), "the history passed the compression threshold")

    def _compress_for(self, error: ClassifiedError) -> bool:
        return self._compress(self._context_tokens() // 2, f"the provider refused it: {error.reason.value}")

    def _compress(self, target: int, why: str) -> bool:
        compaction = compress(self.messages, target_tokens=target, extra=self.system + str(self.tool_schemas),
                              todo_text=self.todo.render)
        if not compaction.effective:
            return False
        self.messages = compaction.messages
        self.session.record("compaction", reason=why, before_tokens=compaction.before_tokens,
                            after_tokens=compaction.after_tokens, dropped_messages=compaction.dropped_messages)
        self.session.record("history", messages=self.messages)
        self._emit(Notice("compaction", f"history compressed ({why}): ~{compaction.before_tokens:,} -> "
                                        f"~{compaction.after_tokens:,} tokens"))
        return True

    # -- plumbing ----------------------------------------------------------------------------

    def _add(self, message: Message) -> None:
        self.messages.append(message)
        self.session.message(message)

    def _emit(self, event: AgentEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # a display failure must never stop the agent
            pass

    def interrupt(self) -> None:
        """Stop the model call in flight, any running script and any running direct tool call
        (a terminal command's whole process tree is killed); `run` returns "interrupted"."""
        self._interrupted.set()
        self._emit(Notice("interrupt", "interrupting"))
        self.caller.interrupt()
        self.runtime.interrupt()

    def close(self) -> None:
        if self._run_lock.locked():  # closed from another thread while running
            self.interrupt()
        self.caller.close()
        self.runtime.close()  # also closes the session transcript it writes to
        self.session.close()
        if self._own_backend:
            self.backend.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _backend_spec(backend: Backend | str | None, configured: str) -> str:
    """The spec that opens this kind of backend again: the configured one when an opened
    backend is of its kind (`docker:IMAGE`, `ssh://USER@HOST`), else the backend's name."""
    if not isinstance(backend, Backend):
        return backend or configured
    kind = configured.split(":", 1)[0].strip().lower() or "local"
    return configured if kind == backend.name else backend.name
