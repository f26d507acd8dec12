"""What the search-provider tests share: a corpus, a local server per provider and the settings
that point web_search at it, and an environment with no search keys of the machine's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.search_apis import KINDS, FakeSearchAPI, Page
from tests.fixtures.browsers import ARTICLE_FACTS

from .conftest import star_url

KEY = "search-test-key"
SEARCH_VARIABLES = ("BRAVE_API_KEY", "BRAVE_SEARCH_API_KEY", "TAVILY_API_KEY", "EXA_API_KEY",
                    "FIRECRAWL_API_KEY", "FIRECRAWL_API_URL")


def star_pages() -> list[Page]:
    pages = [Page(star_url(star), f"{star} — star survey", f"Survey notes on the star {star}, a {kind} about "
                  f"{distance} light-years away.") for star, kind, distance in ARTICLE_FACTS]
    pages.append(Page("https://food.example.org/pasta", "Cooking pasta", "Boil water, salt it, add the pasta."))
    return pages


def settings_for(fake: FakeSearchAPI, key: str | None = KEY) -> dict[str, Any]:
    """Settings that make `fake` web_search's provider (its key in the settings)."""
    if fake.kind == "searxng":
        return {"web.searxng_url": fake.url}
    overrides: dict[str, Any] = {f"web.{fake.kind}_api_url": fake.url}
    if key is not None:
        overrides[f"web.{fake.kind}_api_key"] = key
    return overrides


@pytest.fixture(autouse=True)
def no_search_keys_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests say which provider is configured; the machine's own keys must not decide for them."""
    for name in SEARCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=KINDS)
def api(request: pytest.FixtureRequest) -> Iterator[FakeSearchAPI]:
    """Each provider's API in turn (searxng, brave, tavily, exa), serving the star survey."""
    with FakeSearchAPI(request.param, star_pages(), api_key=KEY) as fake:
        yield fake


@pytest.fixture
def make_api() -> Iterator[Any]:
    made: list[FakeSearchAPI] = []

    def factory(kind: str, **kwargs: Any) -> FakeSearchAPI:
        kwargs.setdefault("api_key", KEY)
        fake = FakeSearchAPI(kind, star_pages(), **kwargs)
        made.append(fake)
        return fake

    yield factory
    for fake in made:
        fake.close()
