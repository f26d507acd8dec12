"""Policy tests: the same call made directly and from a script must get the same answer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from herald import Runtime
from tests.fakes.firecrawl import FakeDocument, FakeFirecrawl

API_KEY = "fc-policy-key"

SCRIPT_CALL = """
import json
import hermes_tools
try:
    hermes_tools.{name}(**json.loads({args!r}))
    print(json.dumps({{"ok": True}}))
except hermes_tools.ToolError as exc:
    print(json.dumps({{"ok": False, "type": exc.error_type, "message": str(exc)}}))
"""


@dataclass
class Outcome:
    ok: bool
    type: str = ""
    message: str = ""

    @property
    def refused(self) -> bool:
        return self.type == "PolicyRefused"


def direct(runtime: Runtime, name: str, args: dict[str, Any]) -> Outcome:
    reply = runtime.dispatcher.call_direct(name, args)
    if "error" in reply:
        return Outcome(False, reply["error"]["type"], reply["error"]["message"])
    return Outcome(True)


def scripted(runtime: Runtime, name: str, args: dict[str, Any]) -> Outcome:
    result = runtime.execute(SCRIPT_CALL.format(name=name, args=json.dumps(args)), timeout=120)
    assert result.status == "success", result
    out = json.loads(result.output)
    return Outcome(out["ok"], out.get("type", ""), out.get("message", ""))


def both(runtime: Runtime, name: str, args: dict[str, Any]) -> Outcome:
    """The call made directly and from a script: both must be refused, or neither, with the
    same message; returns the direct outcome."""
    first = direct(runtime, name, args)
    second = scripted(runtime, name, args)
    assert first.refused == second.refused, (first, second)
    if first.refused:
        assert first.message == second.message
    return first


@pytest.fixture
def firecrawl() -> Iterator[FakeFirecrawl]:
    docs = [FakeDocument("https://docs.example.org/a", "Doc A", "# A\n\nalpha", "about A")]
    with FakeFirecrawl(docs, api_key=API_KEY) as fake:
        yield fake


@pytest.fixture
def web_settings(firecrawl: FakeFirecrawl, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.delenv("FIRECRAWL_API_KEY", raising=False)
    monkeypatch.delenv("FIRECRAWL_API_URL", raising=False)
    return {"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": API_KEY}


MakeRuntime = Callable[..., Runtime]
