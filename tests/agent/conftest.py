"""Agents driven through the real `openai` and `anthropic` SDKs against the local fake LLM
server, over a local backend in the test's workspace."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Agent, Settings
from herald.agent.events import AgentEvent
from tests.fakes.llm_server import FakeLLMServer, Protocol

PROTOCOLS: list[Protocol] = ["openai", "anthropic"]
PROVIDER_OF = {"openai": "openai", "anthropic": "anthropic"}


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    yield server
    server.close()


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> Protocol:
    value: Protocol = request.param
    return value


class RecordingAgent(Agent):
    """An Agent whose events the test reads afterwards from `events`."""

    events: list[AgentEvent]


MakeAgent = Callable[..., RecordingAgent]


@pytest.fixture
def make_agent(llm: FakeLLMServer, protocol: Protocol, settings: Settings, workspace: Path) -> Iterator[MakeAgent]:
    """`make_agent(**agent_settings)` -> an Agent on `protocol` against the fake server; fast
    retries; its events collected in `agent.events`. Closed after the test."""
    made: list[Agent] = []

    def factory(*, overrides: dict[str, Any] | None = None, **kwargs: Any) -> RecordingAgent:
        # "named": a model's session would warm every offered tool (Chromium, ~1.3 s of CPU) in
        # every agent test; test_agent_warm.py checks that default itself.
        tuned = settings.with_overrides({"agent.retry_base_delay": 0.01, "agent.retry_max_delay": 0.05,
                                         "sandbox.warm_tools": "named", **(overrides or {})})
        events: list[AgentEvent] = []
        kwargs.setdefault("provider", PROVIDER_OF[protocol])
        kwargs.setdefault("model", f"scripted-{protocol}")
        kwargs.setdefault("base_url", llm.base_url(protocol))
        kwargs.setdefault("api_key", "test-key")
        kwargs.setdefault("cwd", str(workspace))
        kwargs.setdefault("env", {})
        kwargs.setdefault("on_event", events.append)
        agent = RecordingAgent(settings=tuned, **kwargs)
        agent.events = events
        made.append(agent)
        return agent

    yield factory
    for agent in made:
        agent.close()


def make_project(root: Path, modules: int = 30) -> list[str]:
    """A small package where every module still calls `legacy_round`, plus `check.py`, which
    exits 0 only when no module uses it any more and every function still works."""
    package = root / "ledger"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "money.py").write_text(
        "def legacy_round(x):\n    return round(x, 2)\n\n\ndef round_money(x):\n    return round(x, 2)\n"
    )
    paths = []
    for i in range(modules):
        path = package / f"account_{i:03d}.py"
        path.write_text(
            "from .money import legacy_round, round_money  # noqa\n\n\n"
            f"def total_{i}(values):\n    return legacy_round(sum(values) * {i + 1})\n"
        )
        paths.append(f"ledger/account_{i:03d}.py")
    (root / "check.py").write_text(
        "import importlib, pathlib, sys\n"
        "bad = [p.name for p in pathlib.Path('ledger').glob('account_*.py') if 'legacy_round(' in p.read_text()]\n"
        f"for i in range({modules}):\n"
        "    mod = importlib.import_module(f'ledger.account_{i:03d}')\n"
        "    assert getattr(mod, f'total_{i}')([0.5, 0.25]) == round(0.75 * (i + 1), 2)\n"
        "print('legacy calls left:', len(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    return paths
