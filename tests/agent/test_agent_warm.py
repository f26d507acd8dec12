"""A model's session warms every tool it offers when it starts (sandbox.warm_tools "auto", the
default): the model thinks for seconds before its first script, and Chromium's launch or the web
workers' imports happen meanwhile. "named" leaves the tools the model may never call alone."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from herald.tools import Registry, Tool, ToolContext

from .conftest import MakeAgent

WAIT = 30.0
PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def _registry(warmed: threading.Event) -> Registry:
    def warm(ctx: ToolContext) -> None:
        warmed.set()

    return Registry([Tool(name="peek", description="Peeks.", parameters=PARAMETERS, handler=lambda args, ctx: "x",
                          warm=warm)])


def _join_warm_threads() -> None:
    for thread in threading.enumerate():
        if thread.name.startswith("herald-tool-warm"):
            thread.join(WAIT)


@pytest.mark.parametrize("protocol", ["openai"], indirect=True)
def test_a_model_session_warms_what_it_offers_by_default(make_agent: MakeAgent) -> None:
    warmed = threading.Event()
    make_agent(registry=_registry(warmed), overrides={"sandbox.warm_tools": "auto"})
    assert warmed.wait(WAIT), "the offered tool was not warmed when the model's session started"


@pytest.mark.parametrize("protocol", ["openai"], indirect=True)
def test_named_warms_nothing_the_session_did_not_name(make_agent: MakeAgent) -> None:
    warmed = threading.Event()
    make_agent(registry=_registry(warmed), overrides={"sandbox.warm_tools": "named"})
    _join_warm_threads()
    assert not warmed.is_set()
