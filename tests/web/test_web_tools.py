"""web_search and web_extract: through Firecrawl's v2 API (a local server, the real client) and
the keyless path (httpx + trafilatura) against local pages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald.tools import ToolError
from tests.fakes.firecrawl import FakeFirecrawl
from tests.fixtures.browsers import ARTICLE_FACTS, LocalWebApp, free_port

from .conftest import API_KEY, CallTool, see_also, star_url

MakeWeb = Callable[..., CallTool]


def test_search_goes_through_firecrawl(
    make_web: MakeWeb, firecrawl: FakeFirecrawl, firecrawl_settings: dict[str, Any]
) -> None:
    call = make_web(firecrawl_settings)
    result = call("web_search", query="star survey", limit=3)
    assert result["query"] == "star survey"
    assert len(result["results"]) == 3
    first = result["results"][0]
    assert first["url"].startswith("https://stars.example.org/") and "star survey" in first["title"]
    assert first["description"].startswith("Survey notes on the star")
    (request,) = firecrawl.requests
    assert request["path"] == "/v2/search" and request["authorization"] == f"Bearer {API_KEY}"
    assert request["body"]["query"] == "star survey" and request["body"]["limit"] == 3


def test_search_default_limit_is_five(make_web: MakeWeb, firecrawl_settings: dict[str, Any]) -> None:
    assert len(make_web(firecrawl_settings)("web_search", query="star")["results"]) == 5


def test_search_without_a_provider_names_what_to_set(make_web: MakeWeb) -> None:
    with pytest.raises(ToolError) as info:
        make_web()("web_search", query="anything")
    message = str(info.value)
    assert info.value.error_type == "NoSearchProvider"
    for name in ("FIRECRAWL_API_KEY", "FIRECRAWL_API_URL", "web.firecrawl_api_url"):
        assert name in message


def test_firecrawl_from_herald_environment(
    make_web: MakeWeb, firecrawl: FakeFirecrawl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRECRAWL_API_URL", firecrawl.url)
    monkeypatch.setenv("FIRECRAWL_API_KEY", API_KEY)
    call = make_web()
    assert call("web_search", query="pasta")["results"][0]["url"] == "https://food.example.org/pasta"
    assert call("web_extract", urls=[star_url("Deneb")])["source"] == "firecrawl"


def test_search_with_a_wrong_key_says_what_to_check(make_web: MakeWeb, firecrawl: FakeFirecrawl) -> None:
    call = make_web({"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": "fc-wrong"})
    with pytest.raises(ToolError, match=r"search failed at http://127\.0\.0\.1:\d+: Unauthorized.*FIRECRAWL_API_KEY"):
        call("web_search", query="star")


def test_search_with_firecrawl_down_names_the_address(make_web: MakeWeb) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    call = make_web({"web.firecrawl_api_url": url})
    with pytest.raises(ToolError, match=rf"search failed at {url}: .*FIRECRAWL_API_URL"):
        call("web_search", query="star")


def test_empty_query_is_refused(make_web: MakeWeb, firecrawl_settings: dict[str, Any]) -> None:
    with pytest.raises(ToolError, match="the query is empty"):
        make_web(firecrawl_settings)("web_search", query="  ")


def test_extract_through_firecrawl_reports_failures_per_url(
    make_web: MakeWeb, firecrawl: FakeFirecrawl, firecrawl_settings: dict[str, Any]
) -> None:
    urls = [star_url("Capella"), "https://nowhere.invalid/page", "https://stars.example.org/missing", star_url("Izar")]
    result = make_web(firecrawl_settings)("web_extract", urls=urls)
    assert result["source"] == "firecrawl" and result["failed"] == 2
    capella, nowhere, missing, izar = result["results"]
    assert capella["url"] == urls[0] and capella["title"] == "Capella — star survey"
    assert "Distance: 43 light-years" in capella["content"] and capella["chars"] == len(capella["content"])
    assert nowhere == {"url": urls[1], "error": nowhere["error"]}
    assert nowhere["error"].startswith("Firecrawl could not scrape it:") and "DNS resolution failed" in nowhere["error"]
    assert missing == {"url": urls[2], "error": "HTTP 404: Not Found"}
    assert "Distance: 203 light-years" in izar["content"]
    scrapes = [r["body"] for r in firecrawl.requests if r["path"] == "/v2/scrape"]
    assert sorted(b["url"] for b in scrapes) == sorted(urls)
    assert all(b["formats"] == ["markdown", "links"] and b["onlyMainContent"] is True for b in scrapes)
    # Firecrawl's links are URLs only: in its order, without text, none marked as navigation.
    assert capella["links"] == [{"url": star_url(star), "text": "", "nav": False} for star in see_also(2)]


def test_extract_without_firecrawl_fetches_and_keeps_the_main_content(make_web: MakeWeb, web_app: LocalWebApp) -> None:
    result = make_web()("web_extract", urls=[web_app.url + "/article/3"])
    assert result["source"] == "direct" and result["failed"] == 0
    (page,) = result["results"]
    assert page["title"] == "Survey of Capella"
    assert page["content"].startswith("# Survey of Capella")
    assert "Capella is a yellow giant about 43 light-years from the Sun." in page["content"]
    assert f"[the next survey]({web_app.url}/article/4)" in page["content"]  # links made absolute
    for boilerplate in ("Copyright", "We use cookies", "Log in"):
        assert boilerplate not in page["content"]


def test_extract_without_firecrawl_reports_each_failure(make_web: MakeWeb, web_app: LocalWebApp) -> None:
    refused = f"http://127.0.0.1:{free_port()}/"
    urls = [web_app.url + "/plain.txt", web_app.url + "/api.json", web_app.url + "/data.bin",
            web_app.url + "/no-such-page", refused, "ftp://example.org/file", web_app.url + "/plain.txt"]
    result = make_web()("web_extract", urls=urls)
    plain, data, binary, missing, down, ftp, plain_again = result["results"]
    assert plain == {
        "url": urls[0],
        "title": "",
        "content": "Just plain text.\nSecond line.\n",
        "chars": 30,
        "links": [],
    }
    assert "Aldebaran" in data["content"]
    assert "application/octet-stream is not a text page" in binary["error"]
    assert missing == {"url": urls[3], "error": "HTTP 404 Not Found"}
    assert down["error"].startswith("could not fetch it:")
    assert ftp["error"].startswith("not an http(s) URL")
    assert plain_again == plain
    assert result["failed"] == 4
    assert web_app.hits.count("/plain.txt") >= 1


def test_extract_accepts_one_url_as_a_string(make_web: MakeWeb, web_app: LocalWebApp) -> None:
    (page,) = make_web()("web_extract", urls=web_app.url + "/article/1")["results"]
    assert page["title"] == "Survey of Aldebaran"


def test_long_pages_are_cut_head_and_tail_with_the_full_text_spilled(make_web: MakeWeb, web_app: LocalWebApp) -> None:
    (page,) = make_web()("web_extract", urls=[web_app.url + "/big?words=20000"], char_limit=2000)["results"]
    assert page["truncated"] is True and page["chars"] > 100_000
    assert page["content"].startswith("word0 word1") and page["content"].rstrip().endswith("THE END")
    assert "[... page truncated:" in page["content"] and page["spill_path"] in page["content"]
    assert len(page["content"]) < 2600
    full = Path(page["spill_path"]).read_text()
    assert len(full) == page["chars"] and "word10000 " in full


def test_pages_are_fetched_concurrently_up_to_the_setting(make_web: MakeWeb, web_app: LocalWebApp) -> None:
    # Each page is answered only once five are being served at the same time: one after another,
    # they would wait out the server's deadline and then the fetch timeout.
    urls = [f"{web_app.url}/article/{n}?meet=5" for n in range(1, 11)]
    web_app.reset_counters()
    result = make_web()("web_extract", urls=urls)
    assert result["failed"] == 0
    assert [p["title"] for p in result["results"]] == [f"Survey of {star}" for star, _, _ in ARTICLE_FACTS]
    assert web_app.max_in_flight >= 5  # the ten pages overlapped, not one after another
    web_app.reset_counters()
    slow = [f"{web_app.url}/article/{n}?delay=400" for n in range(1, 5)]  # time to overlap, if they could
    make_web({"web.max_concurrency": 2})("web_extract", urls=slow)
    assert web_app.max_in_flight <= 2


def test_slow_page_times_out_alone(make_web: MakeWeb, web_app: LocalWebApp) -> None:
    # Generous both ways (a loaded machine): the fine page is fetched well within the timeout,
    # the slow one would come far past it.
    urls = [web_app.url + "/slow?ms=120000", web_app.url + "/article/2"]
    slow, fine = make_web({"web.fetch_timeout": 5})("web_extract", urls=urls)["results"]
    assert slow == {"url": urls[0], "error": "timed out (web.fetch_timeout)"}
    assert fine["title"] == "Survey of Betelgeuse"


def test_extract_mode_setting_chooses_the_path(
    make_web: MakeWeb, web_app: LocalWebApp, firecrawl: FakeFirecrawl, firecrawl_settings: dict[str, Any]
) -> None:
    direct = make_web({**firecrawl_settings, "web.extract": "direct"})("web_extract", urls=[web_app.url + "/article/5"])
    assert direct["source"] == "direct" and firecrawl.requests == []
    with pytest.raises(ToolError, match=r"web\.extract is 'firecrawl' but no Firecrawl is configured"):
        make_web({"web.extract": "firecrawl"})("web_extract", urls=[web_app.url + "/article/5"])


def test_extract_argument_errors(make_web: MakeWeb) -> None:
    call = make_web()
    with pytest.raises(ToolError, match="no URLs given"):
        call("web_extract", urls=[])
    with pytest.raises(ToolError, match=r"the limit is 50\. Split them into batches"):
        call("web_extract", urls=[f"http://127.0.0.1/{i}" for i in range(51)])
    with pytest.raises(ToolError, match="'char_limit' must be at least 200"):
        call("web_extract", urls=["http://127.0.0.1/"], char_limit=10)
