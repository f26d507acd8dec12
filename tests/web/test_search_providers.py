"""web_search through each provider (SearXNG, Brave, Tavily, Exa: a local server speaking the
real wire format; Firecrawl: tests/fakes/firecrawl.py) on the real tool path: what is sent, what
comes back, and what each failure tells the model to do."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from herald.backends.shell import cancellable
from herald.config import ConfigError, load_settings
from herald.deadlines import call_deadline
from herald.runtime.toolset import default_registry
from herald.tools import ToolError
from tests.fakes.firecrawl import FakeFirecrawl
from tests.fakes.search_apis import FakeSearchAPI
from tests.fixtures.browsers import free_port
from tests.tools.conftest import registered

from .conftest import API_KEY as FIRECRAWL_KEY
from .conftest import CallTool, star_url
from .search_setup import KEY, api, make_api, no_search_keys_in_environment, settings_for

__all__ = ["api", "make_api", "no_search_keys_in_environment"]  # fixtures used here

MakeWeb = Callable[..., CallTool]
TOOL = registered(default_registry(), "web_search")


def search_error(call: CallTool, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        call("web_search", **args)
    return info.value


# -- success, and the wire format each provider is spoken to in -----------------------------------


def test_search_returns_hits_and_names_the_provider(make_web: MakeWeb, api: FakeSearchAPI) -> None:
    result = make_web(settings_for(api))("web_search", query="star survey Deneb", limit=3)
    assert result["provider"] == api.kind and result["query"] == "star survey Deneb"
    hits = result["results"]
    assert len(hits) == 3 and set(hits[0]) == {"url", "title", "description"}
    assert hits[0]["url"] == star_url("Deneb") and hits[0]["title"] == "Deneb — star survey"
    # Brave's <strong> markup and entities are gone; every provider's snippet reads the same.
    assert (
        hits[0]["description"] == "Survey notes on the star Deneb, a blue-white supergiant about 2615 light-years away."
    )
    assert all(h["url"].startswith("https://stars.example.org/") for h in hits)
    assert "note" not in result


def test_each_provider_is_asked_in_its_own_wire_format(make_web: MakeWeb, api: FakeSearchAPI) -> None:
    make_web(settings_for(api))("web_search", query="pasta", limit=4)
    (request,) = api.requests
    headers = request["headers"]
    if api.kind == "searxng":
        assert (request["method"], request["path"]) == ("GET", "/search")
        assert request["query"] == {"q": "pasta", "format": "json"}
    elif api.kind == "brave":
        assert (request["method"], request["path"]) == ("GET", "/res/v1/web/search")
        assert request["query"] == {"q": "pasta", "count": "4"} and headers["x-subscription-token"] == KEY
        assert headers["accept"] == "application/json"
    elif api.kind == "tavily":
        assert (request["method"], request["path"]) == ("POST", "/search")
        assert headers["authorization"] == f"Bearer {KEY}"
        assert request["body"]["query"] == "pasta" and request["body"]["max_results"] == 4
    else:
        assert (request["method"], request["path"]) == ("POST", "/search")
        assert headers["x-api-key"] == KEY
        assert request["body"]["query"] == "pasta" and request["body"]["numResults"] == 4
        assert request["body"]["contents"] == {"highlights": {"maxCharacters": 400}}
    # No key travels where it does not belong: not in the URL, and no other provider's header.
    assert KEY not in str(request["query"]) and ("authorization" in headers) == (api.kind == "tavily")


def test_default_limit_is_five(make_web: MakeWeb, api: FakeSearchAPI) -> None:
    assert len(make_web(settings_for(api))("web_search", query="star")["results"]) == 5


def test_no_match_is_an_empty_list_not_an_error(make_web: MakeWeb, api: FakeSearchAPI) -> None:
    result = make_web(settings_for(api))("web_search", query="zeppelin")
    assert result == {"query": "zeppelin", "provider": api.kind, "results": []}


def test_a_limit_above_the_providers_cap_is_capped_and_said(make_web: MakeWeb, make_api: Any) -> None:
    brave = make_api("brave")
    result = make_web(settings_for(brave))("web_search", query="star", limit=50)
    assert brave.requests[0]["query"]["count"] == "20"  # Brave refuses more than 20 (422)
    assert "Brave Search returns at most 20 results per search" in result["note"]
    tavily = make_api("tavily")
    make_web(settings_for(tavily))("web_search", query="star", limit=50)
    assert tavily.requests[0]["body"]["max_results"] == 20


def test_keys_come_from_heralds_environment(make_web: MakeWeb, make_api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for kind, variable in (("brave", "BRAVE_SEARCH_API_KEY"), ("tavily", "TAVILY_API_KEY"), ("exa", "EXA_API_KEY")):
        fake = make_api(kind)
        monkeypatch.setenv(variable, KEY)
        result = make_web(settings_for(fake, key=None))("web_search", query="pasta")
        assert result["provider"] == kind and result["results"][0]["url"] == "https://food.example.org/pasta"
        monkeypatch.delenv(variable)


# -- failures: each says what to do -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["brave", "tavily", "exa"])  # SearXNG takes no key
def test_a_refused_key_names_the_setting_it_came_from(make_web: MakeWeb, make_api: Any, kind: str) -> None:
    fake = make_api(kind)
    error = search_error(make_web(settings_for(fake, key="wrong-key")), query="star")
    assert error.error_type == "SearchAuthFailed", error
    assert f"the search failed at {fake.url}" in str(error)
    assert f"refused the API key from the setting web.{kind}_api_key: set a valid key there" in str(error)
    assert "wrong-key" not in str(error)  # a key is never repeated back


def test_a_refused_key_from_the_environment_names_the_variable(make_web: MakeWeb, make_api: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    brave = make_api("brave")
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "stale-key")
    error = search_error(make_web(settings_for(brave, key=None)), query="star")
    message = str(error)
    # Brave says 422 SUBSCRIPTION_TOKEN_INVALID, not 401: still a refused key.
    assert (
        error.error_type == "SearchAuthFailed" and "HTTP 422" in message and "subscription token is invalid" in message
    )
    assert "refused the API key from BRAVE_SEARCH_API_KEY (Herald's environment): set a valid key there" in message
    assert "web.brave_api_key" in message and "stale-key" not in message


def test_rate_limited_says_wait_and_retry(make_web: MakeWeb, api: FakeSearchAPI) -> None:
    api.rate_limited(retry_after=7)
    error = search_error(make_web(settings_for(api)), query="star")
    assert error.error_type == "SearchRateLimited", error
    assert "HTTP 429" in str(error) and "wait 7 s and search again" in str(error)


def test_used_up_credits_say_retrying_will_not_help(make_web: MakeWeb, make_api: Any) -> None:
    for kind, status in (("brave", "HTTP 429"), ("tavily", "HTTP 432"), ("exa", "HTTP 402")):
        fake = make_api(kind)
        fake.quota_used_up()
        error = search_error(make_web(settings_for(fake)), query="star")
        assert error.error_type == "SearchQuotaExhausted", (kind, error)
        assert status in str(error) and "searching again will not help" in str(error)


def test_a_server_error_names_the_address_and_where_it_is_set(make_web: MakeWeb, api: FakeSearchAPI) -> None:
    api.fail_with(502, "<html><body>Bad Gateway</body></html>")
    error = search_error(make_web(settings_for(api)), query="star")
    assert error.error_type == "SearchFailed", error
    setting = "web.searxng_url" if api.kind == "searxng" else f"web.{api.kind}_api_url"
    assert f"the search failed at {api.url}: HTTP 502 Bad Gateway." in str(error)
    assert f"is down or unreachable at {api.url}: try again later, or check the setting {setting}" in str(error)


def test_a_provider_that_is_not_there_names_its_address(make_web: MakeWeb) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for overrides in ({"web.searxng_url": url}, {"web.exa_api_key": KEY, "web.exa_api_url": url}):
        error = search_error(make_web(overrides), query="star")
        assert error.error_type == "SearchFailed" and "could not reach it" in str(error)
        assert f"is down or unreachable at {url}" in str(error)


def test_searxng_without_the_json_format_says_how_to_turn_it_on(make_web: MakeWeb, make_api: Any) -> None:
    searxng = make_api("searxng")
    searxng.json_format = False
    error = search_error(make_web(settings_for(searxng)), query="star")
    assert error.error_type == "SearchMisconfigured"
    assert "HTTP 403 Forbidden (the instance does not serve JSON)" in str(error)
    assert "add json to search.formats in the instance's settings.yml" in str(error)


def test_searxng_whose_engines_failed_is_not_an_empty_answer(make_web: MakeWeb, make_api: Any) -> None:
    searxng = make_api("searxng")
    searxng.unresponsive = ["google", "duckduckgo"]
    error = search_error(make_web(settings_for(searxng)), query="star")
    assert (
        error.error_type == "SearchFailed"
        and "its engines did not answer (google CAPTCHA; duckduckgo CAPTCHA)" in str(error)
    )


def test_a_url_that_is_not_the_api_says_so(make_web: MakeWeb, web_app: Any) -> None:
    """A SearXNG URL that points at some web app: HTML, not the API's JSON."""
    error = search_error(make_web({"web.searxng_url": web_app.url}), query="star")
    assert error.error_type in ("SearchMisconfigured", "SearchFailed"), error
    assert "check the setting web.searxng_url" in str(error)


def test_a_redirect_is_not_followed_with_the_key(make_web: MakeWeb, make_api: Any) -> None:
    """An API address that redirects elsewhere: the key must not travel to the redirect's target."""
    elsewhere = make_api("brave", api_key="other")
    brave = make_api("brave")
    brave.fail_with(307, "", {"Location": f"{elsewhere.url}/res/v1/web/search?q=star"})
    error = search_error(make_web(settings_for(brave)), query="star")
    assert error.error_type == "SearchMisconfigured" and f"it redirects to {elsewhere.url}" in str(error)
    assert "Set the setting web.brave_api_url to the address it redirects to" in str(error)
    assert elsewhere.requests == []


# -- the run's deadline, web.fetch_timeout, cancellation -------------------------------------------


def test_a_stalling_provider_ends_at_the_run_deadline(make_web: MakeWeb, api: FakeSearchAPI) -> None:
    api.stall()
    call = make_web(settings_for(api))
    started = time.monotonic()
    with call_deadline(started + 2):
        error = search_error(call, query="star")
    took = time.monotonic() - started
    assert error.error_type == "Timeout" and "the run's time limit was reached" in str(error), error
    assert took < 2 + 3, took  # web.fetch_timeout is 30 s: the deadline ended it
    assert api.stalled.is_set()


def test_a_stalling_provider_ends_at_the_fetch_timeout(make_web: MakeWeb, make_api: Any) -> None:
    tavily = make_api("tavily")
    tavily.stall()
    started = time.monotonic()
    error = search_error(make_web({**settings_for(tavily), "web.fetch_timeout": 1}), query="star")
    assert time.monotonic() - started < 1 + 3
    assert error.error_type == "Timeout"
    assert f"Tavily at {tavily.url} did not answer within 1 s (web.fetch_timeout)" in str(error)


def test_a_search_started_after_the_deadline_does_not_go_out(make_web: MakeWeb, make_api: Any) -> None:
    exa = make_api("exa")
    with (
        call_deadline(time.monotonic() - 1),
        pytest.raises(TimeoutError, match="time limit was reached before web_search"),
    ):
        make_web(settings_for(exa))("web_search", query="star")
    assert exa.requests == []


def test_a_cancelled_call_stops_waiting(make_web: MakeWeb, make_api: Any) -> None:
    brave = make_api("brave")
    brave.stall()
    call = make_web(settings_for(brave))
    cancel = threading.Event()
    def cancel_once_brave_is_asked() -> None:
        if brave.stalled.wait(60):
            cancel.set()

    brave_asked = threading.Thread(target=cancel_once_brave_is_asked, daemon=True)
    brave_asked.start()
    started = time.monotonic()
    with cancellable(cancel):
        error = search_error(call, query="star")
    assert error.error_type == "Interrupted" and time.monotonic() - started < 30
    brave_asked.join(5)


# -- which provider: auto order, the setting, availability ------------------------------------------


def test_auto_takes_the_first_configured_in_the_documented_order(make_web: MakeWeb, make_api: Any,
                                                                 firecrawl: FakeFirecrawl) -> None:
    fakes = {kind: make_api(kind) for kind in ("searxng", "brave", "tavily", "exa")}
    configured: dict[str, Any] = {"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": FIRECRAWL_KEY}
    for fake in fakes.values():
        configured.update(settings_for(fake))
    order = ["searxng", "firecrawl", "brave", "tavily", "exa"]
    for expected in order:
        assert make_web(configured)("web_search", query="pasta")["provider"] == expected
        # The one that answered is left out next time: the next in the order answers.
        for key in [k for k in configured if k.startswith(f"web.{expected}")]:
            configured[key] = ""
    assert [r["path"] for r in firecrawl.requests] == ["/v2/search"]
    assert all(len(fake.requests) == 1 for fake in fakes.values())


def test_the_setting_picks_a_provider_over_the_order(make_web: MakeWeb, make_api: Any) -> None:
    searxng, exa = make_api("searxng"), make_api("exa")
    call = make_web({**settings_for(searxng), **settings_for(exa), "web.search_provider": "exa"})
    assert call("web_search", query="pasta")["provider"] == "exa"
    assert searxng.requests == []


def test_a_named_provider_that_is_not_configured_says_what_to_set(make_web: MakeWeb, settings: Any,
                                                                  make_api: Any) -> None:
    searxng = make_api("searxng")
    overrides = {**settings_for(searxng), "web.search_provider": "tavily"}
    error = search_error(make_web(overrides), query="star")
    assert error.error_type == "NoSearchProvider"
    assert "web.search_provider is 'tavily' but it is not configured: set TAVILY_API_KEY" in str(error)
    reason = TOOL.unavailable_reason(settings.with_overrides(overrides))
    assert reason is not None and "TAVILY_API_KEY (or web.tavily_api_key)" in reason
    assert searxng.requests == []


def test_an_unknown_provider_is_a_settings_error(settings: Any, tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match=r"setting 'web.search_provider' must be one of \"auto\", \"searxng\", "
                                          r"\"firecrawl\", \"brave\", \"tavily\", \"exa\", got 'google'"):
        settings.with_overrides({"web.search_provider": "google"})
    with pytest.raises(
        ConfigError, match=r"environment variable HERALD_WEB_SEARCH_PROVIDER: setting 'web\.search_provider'"
    ):
        load_settings(env={"HERALD_CONFIG": str(tmp_path / "absent.toml"), "HERALD_WEB_SEARCH_PROVIDER": "bing"})
    config = tmp_path / "config.toml"
    config.write_text('[web]\nsearch_provider = "Brave"\n')
    with pytest.raises(ConfigError, match=rf"{config}: setting 'web.search_provider' must be one of"):
        load_settings(config)


def test_unavailable_says_precisely_what_to_set(settings: Any, make_api: Any) -> None:
    reason = TOOL.unavailable_reason(settings)
    assert reason is not None and reason.startswith("no search provider is configured")
    for needed in (
        "web.searxng_url",
        "FIRECRAWL_API_KEY",
        "FIRECRAWL_API_URL",
        "web.firecrawl_api_url",
        "BRAVE_API_KEY",
        "BRAVE_SEARCH_API_KEY",
        "web.brave_api_key",
        "TAVILY_API_KEY",
        "EXA_API_KEY",
        "web.exa_api_key",
    ):
        assert needed in reason, needed
    for kind in ("searxng", "brave", "tavily", "exa"):
        assert TOOL.unavailable_reason(settings.with_overrides(settings_for(make_api(kind)))) is None, kind


def test_firecrawl_stays_a_provider_like_the_others(make_web: MakeWeb, firecrawl: FakeFirecrawl,
                                                    firecrawl_settings: dict[str, Any]) -> None:
    result = make_web(firecrawl_settings)("web_search", query="pasta", limit=2)
    assert result["provider"] == "firecrawl" and result["results"][0]["url"] == "https://food.example.org/pasta"
    error = search_error(make_web({**firecrawl_settings, "web.firecrawl_api_key": "fc-wrong"}), query="star")
    assert error.error_type == "SearchAuthFailed"
    assert "Firecrawl refused the API key from the setting web.firecrawl_api_key" in str(error)


def test_doctor_names_the_provider_in_force_and_the_others(tmp_path: Any) -> None:
    from tests.cli._herald import run

    def web_row(**env: str) -> dict[str, str]:
        proc = run(["doctor", "--json"], tmp_path, tmp_path, None, 120, **env)
        return next(r for r in json.loads(proc.stdout) if r["check"] == "web")

    row = web_row(HERALD_WEB_SEARXNG_URL="http://searx.lan:8080", BRAVE_API_KEY="bk-1", TAVILY_API_KEY="tvly-1")
    assert row["status"] == "ok"
    assert ("web_search through SearXNG at http://searx.lan:8080 (auto: the first configured); "
            "also configured: brave, tavily") in row["detail"]
    row = web_row(BRAVE_SEARCH_API_KEY="bk-1", TAVILY_API_KEY="tvly-1", HERALD_WEB_SEARCH_PROVIDER="tavily")
    assert ("web_search through Tavily at https://api.tavily.com (web.search_provider, key from TAVILY_API_KEY "
            "(Herald's environment)); also configured: brave") in row["detail"]
    assert "bk-1" not in row["detail"] and "tvly-1" not in row["detail"]
    row = web_row(HERALD_WEB_SEARCH_PROVIDER="exa")
    assert row["status"] == "warn"
    assert "web_search is off: web.search_provider is 'exa' but it is not configured: set EXA_API_KEY" in row["detail"]


def test_secrets_echoed_by_a_provider_are_not_repeated(make_web: MakeWeb, make_api: Any) -> None:
    exa = make_api("exa")
    exa.fail_with(401, {"requestId": "r1", "error": f"Invalid API key: {KEY}", "tag": "INVALID_API_KEY"})
    error = search_error(make_web(settings_for(exa)), query="star")
    assert KEY not in str(error) and "Invalid API key: [redacted]" in str(error)


def test_searxng_behind_basic_auth_keeps_its_password_out_of_messages(make_web: MakeWeb, make_api: Any) -> None:
    searxng = make_api("searxng")
    with_credentials = searxng.url.replace("http://", "http://herald:s3cret-pass@")
    call = make_web({"web.searxng_url": with_credentials})
    assert call("web_search", query="pasta")["results"][0]["url"] == "https://food.example.org/pasta"
    assert searxng.requests[0]["headers"]["authorization"] == "Basic aGVyYWxkOnMzY3JldC1wYXNz"  # herald:s3cret-pass
    searxng.fail_with(502, "")
    error = search_error(call, query="pasta")
    assert f"at {searxng.url}:" in str(error) and "s3cret" not in str(error)
