"""web_search from a script (a sandboxed execute_code run, isolation at its default) through each
provider: the hits, the provider's name, a failure as the script sees it, and a stalling provider
cut by the run's time limit."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from herald import Runtime, Settings
from tests.fakes.search_apis import FakeSearchAPI
from tests.fixtures.browsers import ARTICLE_FACTS
from tests.runtime._helpers import run_ok, script

from .search_setup import api, make_api, no_search_keys_in_environment, settings_for

__all__ = ["api", "make_api", "no_search_keys_in_environment"]  # fixtures used here

SURVEY = """
import json, re
from hermes_tools import web_search, parallel
replies = parallel([(web_search, f"star survey {star}", 1) for star in STARS])  # ten searches at once
print(json.dumps({
    "providers": sorted({r["provider"] for r in replies}),
    "stars": [r["results"][0]["title"].split(" — ")[0] for r in replies],
    "distances": [int(re.search(r"about (\\d+) light-years", r["results"][0]["description"]).group(1))
                  for r in replies],
}))
"""


def test_a_script_searches_through_each_provider(make_runtime: Callable[..., Runtime], api: FakeSearchAPI) -> None:
    stars = [star for star, _, _ in ARTICLE_FACTS]
    runtime = make_runtime(overrides=settings_for(api))
    result = run_ok(runtime, f"STARS = {stars!r}\n" + SURVEY, timeout=120)
    out = json.loads(result.output)
    assert out["providers"] == [api.kind]
    assert out["stars"] == stars
    assert out["distances"] == [distance for _, _, distance in ARTICLE_FACTS]
    assert result.tool_calls_made == 10 and len(api.requests) == 10


def test_a_script_sees_what_to_do_when_the_key_is_refused(
    make_runtime: Callable[..., Runtime], make_api: Callable[..., FakeSearchAPI]
) -> None:
    tavily = make_api("tavily")
    runtime = make_runtime(overrides=settings_for(tavily, key="tvly-wrong"))
    result = run_ok(runtime, """
        from hermes_tools import web_search, ToolError
        try:
            web_search("star")
        except ToolError as exc:
            print(type(exc).__name__, "|", exc)
    """, timeout=120)
    assert result.output.startswith("ToolError | ")
    assert "Tavily refused the API key from the setting web.tavily_api_key: set a valid key there" in result.output
    assert "tvly-wrong" not in result.output


def test_the_run_time_limit_ends_a_search_that_stalls(
    make_runtime: Callable[..., Runtime], make_api: Callable[..., FakeSearchAPI], settings: Settings
) -> None:
    brave = make_api("brave")
    brave.stall()
    runtime = make_runtime(overrides=settings_for(brave))
    started = time.monotonic()
    result = runtime.execute(script("""
        from hermes_tools import web_search, ToolError
        try:
            web_search("star")
        except ToolError as exc:
            print("stopped:", exc)
    """), timeout=4)
    took = time.monotonic() - started
    grace = settings.sandbox.kill_grace
    print(f"a run with timeout 4 s and a stalling search ended after {took:.2f} s ({result.status})")
    assert brave.stalled.is_set()
    assert took < 4 + grace + 5, (took, result)
    if result.status == "success":  # the search's own deadline ended it just before the run's
        assert "the run's time limit was reached before Brave Search answered" in result.output
    else:
        assert result.status == "timeout", result
