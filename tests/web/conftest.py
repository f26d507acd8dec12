"""Web tools against a local Firecrawl v2 server (through the real firecrawl-py client) and
against the local web app (the keyless path: httpx + trafilatura)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest

from herald import Settings
from herald.backends.local import LocalBackend
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext
from herald.tools.arguments import bind_arguments
from tests.fakes.firecrawl import FakeDocument, FakeFirecrawl
from tests.fixtures.browsers import ARTICLE_FACTS

API_KEY = "fc-test-key"
PROVIDER_VARIABLES = ("FIRECRAWL_API_KEY", "FIRECRAWL_API_URL", "BRAVE_API_KEY", "BRAVE_SEARCH_API_KEY",
                      "TAVILY_API_KEY", "EXA_API_KEY")
CallTool = Callable[..., Any]


def star_url(star: str) -> str:
    return f"https://stars.example.org/{star.lower()}"


def see_also(index: int) -> list[str]:
    """The two stars star `index`'s page refers to."""
    return [ARTICLE_FACTS[(index + 1) % len(ARTICLE_FACTS)][0], ARTICLE_FACTS[(index + 3) % len(ARTICLE_FACTS)][0]]


def star_documents() -> list[FakeDocument]:
    docs = []
    for i, (star, kind, distance) in enumerate(ARTICLE_FACTS):
        markdown = (
            f"# {star}\n\n{star} is a {kind}.\n\n- Distance: {distance} light-years\n- Kind: {kind}\n\n"
            f"See also: {', '.join(see_also(i))}.\n"
        )
        links = [star_url(other) for other in see_also(i)]
        docs.append(
            FakeDocument(
                star_url(star), f"{star} — star survey", markdown, f"Survey notes on the star {star}.", links=links
            )
        )
    docs.append(FakeDocument("https://food.example.org/pasta", "Cooking pasta", "# Pasta\n\nBoil water.", "Recipes"))
    docs.append(FakeDocument("https://stars.example.org/missing", "Not found", "", status=404))
    return docs


@pytest.fixture(autouse=True)
def no_web_provider_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests say where Firecrawl and the search providers are; a key in the machine's environment
    must not decide for them."""
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def firecrawl() -> Iterator[FakeFirecrawl]:
    with FakeFirecrawl(star_documents(), api_key=API_KEY) as fake:
        yield fake


class WebSession:
    """`session(name, **args)` calls a web tool in one session (its ToolContext: `ctx`)."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx
        self._registry = default_registry()

    def __call__(self, name: str, **args: Any) -> Any:
        tool = self._registry.get(name)
        assert tool is not None
        return tool.handler(bind_arguments(tool, args), self.ctx)


@pytest.fixture
def make_web(local_backend: LocalBackend, settings: Settings) -> Iterator[Callable[..., WebSession]]:
    """`make_web(overrides)` -> a session with those settings, closed at the test's end (its
    extraction workers with it)."""
    sessions: list[WebSession] = []

    def factory(overrides: Mapping[str, Any] | None = None) -> WebSession:
        session = WebSession(ToolContext(backend=local_backend, settings=settings.with_overrides(overrides or {})))
        sessions.append(session)
        return session

    yield factory
    for session in sessions:
        session.ctx.close()


@pytest.fixture
def firecrawl_settings(firecrawl: FakeFirecrawl) -> dict[str, Any]:
    return {"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": API_KEY}


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 answering with `handler`: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def extract_one(call: CallTool, url: str) -> dict[str, Any]:
    """The one page of a keyless web_extract of `url`, which must not fail."""
    reply = call("web_extract", urls=[url])
    assert reply["source"] == "direct" and reply["failed"] == 0, reply
    page: dict[str, Any] = reply["results"][0]
    return page
