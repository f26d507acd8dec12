"""web_crawl over a small local site with several levels, a cycle, a 404, a redirect off the site
(refused by the policy), navigation links, an external link and robots.txt; through a Dispatcher
as a model's call, from a script, and through Firecrawl's crawl (the local fake, the real client).

The site listens on 127.0.0.1; the tests start from "localhost" and allow only that name, so a
redirect or link to 127.0.0.1 is a hop the policy refuses."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.deadlines import call_deadline
from herald.policy import Policy
from herald.runtime.dispatcher import Dispatcher
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext
from herald.tools.crawlpaths import PathPatterns
from tests.fakes.firecrawl import FakeFirecrawl
from tests.runtime._helpers import run_ok
from tests.web.site import Page, Site, html

from .conftest import API_KEY, star_url

Crawl = Callable[..., dict[str, Any]]
NAV = [("/about", "About"), ("/guide/", "Guide")]


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    pages = {
        "/": html(
            "Home", links=[("/guide/intro", "Intro"), ("/guide/setup", "Setup"), ("/blog/post-1", "Post 1")], nav=NAV
        ),
        "/guide/intro": html(
            "Intro",
            links=[("/guide/advanced", "Advanced"), ("/", "Home"), ("#usage", "Usage"), ("/missing", "Missing")],
            nav=NAV,
        ),
        "/guide/setup": html("Setup", links=[("/guide/intro", "Intro"), ("/moved", "Moved")], nav=NAV),
        "/guide/advanced": html("Advanced", links=[("/guide/deep", "Deep")], nav=NAV),
        "/guide/deep": html("Deep", "The deepest page.", nav=NAV),
        "/blog/post-1": html("Post 1", links=[("/blog/post-2", "Post 2")], nav=NAV),
        "/blog/post-2": html("Post 2", nav=NAV),
        "/about": html("About", links=[("http://nowhere.invalid/page", "Elsewhere")], nav=NAV),
        "/guide/": html("Guide", links=[("/guide/intro", "Intro"), ("/guide/setup", "Setup")], nav=NAV),
    }
    for path, body in pages.items():
        server.add(path, body)
    server.add("/moved", Page(status=302, location=server.url("/secret")))  # 127.0.0.1: not allowed
    server.add("/secret", html("Secret"))
    yield server
    server.close()


@pytest.fixture
def make_crawl(local_backend: LocalBackend, settings: Settings) -> Iterator[Callable[..., Crawl]]:
    """`make_crawl(**settings)` -> `crawl(url, **args)`: web_crawl through a Dispatcher whose
    policy allows only localhost (unless the settings say otherwise); returns the reply."""
    contexts: list[ToolContext] = []

    def factory(**overrides: Any) -> Crawl:
        session = settings.with_overrides(
            {"web.extract": "direct", "policy.allowed_domains": ["localhost"], **overrides}
        )
        ctx = ToolContext(backend=local_backend, settings=session)
        contexts.append(ctx)
        dispatcher = Dispatcher(default_registry(), ctx, policy=Policy.from_settings(session))

        def crawl(url: str, **args: Any) -> dict[str, Any]:
            if url == "web_extract":  # the same session's web_extract
                return dispatcher.call_direct("web_extract", args)
            return dispatcher.call_direct("web_crawl", {"url": url, **args})

        return crawl

    yield factory
    for ctx in contexts:
        ctx.close()


def visited(reply: dict[str, Any]) -> list[tuple[str, int]]:
    assert "result" in reply, reply
    return [(page["url"].split(":", 2)[2].split("/", 1)[1], page["depth"]) for page in reply["result"]["results"]]


def by_path(reply: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"/" + page["url"].split(":", 2)[2].split("/", 1)[1]: page for page in reply["result"]["results"]}


def test_breadth_first_content_links_first_each_page_once(make_crawl: Callable[..., Crawl], site: Site) -> None:
    reply = make_crawl()(site.url("/", host="localhost"))
    assert visited(reply) == [
        ("", 0),
        ("guide/intro", 1), ("guide/setup", 1), ("blog/post-1", 1), ("about", 1), ("guide/", 1),  # content, then nav
        ("guide/advanced", 2), ("missing", 2), ("moved", 2), ("blog/post-2", 2),
        ("guide/deep", 3),
    ]
    pages = by_path(reply)
    assert "The deepest page." in pages["/guide/deep"]["content"]
    assert pages["/missing"]["error"].startswith("HTTP 404")
    assert "refused the redirect from" in pages["/moved"]["error"]
    assert "127.0.0.1 is not in policy.allowed_domains" in pages["/moved"]["error"]
    result = reply["result"]
    assert result["source"] == "direct" and result["pages"] == 11 and result["failed"] == 2
    assert result["skipped"] == {"off_site": 1}  # nowhere.invalid, linked from /about
    # Each page asked for once (the cycle back home and the #fragment included), robots.txt once,
    # the refused hop never.
    assert all(count == 1 for count in site.hits.values()), site.hits
    assert site.hits["/robots.txt"] == 1 and site.hits["/secret"] == 0


def test_max_pages_cuts_the_crawl_in_crawl_order(make_crawl: Callable[..., Crawl], site: Site) -> None:
    reply = make_crawl()(site.url("/", host="localhost"), max_pages=4)
    assert visited(reply) == [("", 0), ("guide/intro", 1), ("guide/setup", 1), ("blog/post-1", 1)]
    # Found but not read: /about and /guide/ at depth 1, and the four pages the three read link to.
    assert reply["result"]["skipped"] == {"over_max_pages": 6}
    assert site.hits["/about"] == 0 and site.hits["/guide/advanced"] == 0


def test_max_pages_has_a_hard_cap(make_crawl: Callable[..., Crawl], site: Site) -> None:
    reply = make_crawl()(site.url("/", host="localhost"), max_pages=500)
    assert "max_pages=500 is over the limit of 200 pages" in reply["error"]["message"]
    assert "include=" in reply["error"]["message"]
    assert not site.hits


def test_include_globs_and_regexes(make_crawl: Callable[..., Crawl], site: Site) -> None:
    crawl = make_crawl()
    guide = crawl(site.url("/", host="localhost"), include="/guide/**")
    assert visited(guide) == [("", 0), ("guide/intro", 1), ("guide/setup", 1), ("guide/", 1),
                              ("guide/advanced", 2), ("guide/deep", 3)]
    assert guide["result"]["skipped"]["excluded"] == 4  # post-1, about, missing, moved
    blog = crawl(site.url("/", host="localhost"), include=["re:^/blog/", "deep"])
    assert visited(blog) == [("", 0), ("blog/post-1", 1), ("blog/post-2", 2)]
    bad = crawl(site.url("/", host="localhost"), include="re:(")
    assert "the include pattern 're:(' is not valid" in bad["error"]["message"]


def test_same_site_false_follows_other_hosts_the_policy_allows(make_crawl: Callable[..., Crawl], site: Site) -> None:
    site.add("/", html("Home", links=[("/about", "About"), (site.url("/guide/deep"), "Deep on 127.0.0.1")]))
    site.add("/about", html("About", links=[("http://nowhere.invalid/page", "Elsewhere")]))
    site.add("/guide/deep", html("Deep"))
    crawl = make_crawl(**{"policy.allowed_domains": ["localhost", "127.0.0.1"]})
    same = crawl(site.url("/", host="localhost"), max_pages=3)
    assert visited(same) == [("", 0), ("about", 1)] and same["result"]["skipped"] == {"off_site": 2}
    other = crawl(site.url("/", host="localhost"), max_pages=3, same_site=False)
    assert visited(other) == [("", 0), ("about", 1), ("guide/deep", 1)]
    assert by_path(other)["/guide/deep"]["url"].startswith("http://127.0.0.1:")
    # nowhere.invalid is off the allowed domains: not followed, not fetched.
    assert other["result"]["skipped"] == {"refused": 1}


def test_robots_txt_is_honoured_with_our_group_over_the_default(make_crawl: Callable[..., Crawl], site: Site) -> None:
    site.add("/robots.txt", Page("User-agent: *\nDisallow: /blog/\n", content_type="text/plain"))
    reply = make_crawl()(site.url("/", host="localhost"))
    assert ("blog/post-1", 1) not in visited(reply) and reply["result"]["skipped"]["robots"] == 1
    assert site.hits["/blog/post-1"] == 0
    # A group naming Herald's product token replaces the * group for Herald.
    site.add("/robots.txt", Page("User-agent: *\nDisallow: /\n\nUser-agent: heraldagent\nDisallow: /guide/\n"
                                 "Allow: /guide/intro\n", content_type="text/plain"))
    paths = [path for path, _ in visited(make_crawl()(site.url("/", host="localhost")))]
    assert "guide/intro" in paths and "guide/setup" not in paths and "blog/post-1" in paths


def test_a_session_crawls_once_unless_fresh(make_crawl: Callable[..., Crawl], site: Site) -> None:
    crawl = make_crawl()
    first = crawl(site.url("/", host="localhost"))
    requests = sum(site.hits.values())
    again = crawl(site.url("/", host="localhost"))
    assert visited(again) == visited(first)
    # Asked again: the 404 (errors are not kept) and the 302 (not cacheable without caching headers).
    assert sum(site.hits.values()) == requests + 2 and site.hits["/missing"] == site.hits["/moved"] == 2
    crawl(site.url("/", host="localhost"), fresh=True)
    assert site.hits["/"] == 2 and site.hits["/guide/deep"] == 2


def test_a_level_is_fetched_in_parallel(make_crawl: Callable[..., Crawl], site: Site) -> None:
    for path in ("/guide/intro", "/guide/setup", "/blog/post-1"):
        site.pages[path].hold = True
    reply: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: reply.update(make_crawl()(site.url("/", host="localhost"), max_pages=4)))
    worker.start()
    try:
        assert site.wait_for(lambda: site.in_flight == 3, 30), f"in flight: {site.in_flight}"
    finally:
        site.release()
        worker.join(60)
    assert len(visited(reply)) == 4


@pytest.mark.parametrize("stalls", ["/guide/intro", "/robots.txt"])
def test_the_run_deadline_ends_a_crawl(make_crawl: Callable[..., Crawl], site: Site, stalls: str) -> None:
    """A page of a level, or a site's robots.txt, that does not answer: the crawl ends at the
    run's deadline with an error that says what to do."""
    site.add(
        stalls,
        Page("User-agent: *\nDisallow:\n", hold=True) if stalls == "/robots.txt" else Page(html("Slow"), hold=True),
    )
    crawl = make_crawl()
    started = time.monotonic()
    with call_deadline(started + 2):
        reply = crawl(site.url("/", host="localhost"))
    site.release()
    assert reply["error"]["type"] == "Timeout", reply
    assert "web_crawl stopped: the run's time limit was reached" in reply["error"]["message"]
    assert "max_pages" in reply["error"]["message"]
    assert time.monotonic() - started < 2 + 5


def test_web_crawl_from_a_script(make_runtime: Callable[..., Runtime], site: Site) -> None:
    runtime = make_runtime(overrides={"web.extract": "direct", "policy.allowed_domains": ["localhost"]})
    result = run_ok(
        runtime,
        f"""
        import json
        from hermes_tools import web_crawl
        reply = web_crawl({site.url("/", host="localhost")!r}, max_pages=6, include="/guide/**")
        print(json.dumps([[p["url"].rsplit(":", 1)[1].split("/", 1)[1], p["depth"], p.get("title")]
                          for p in reply["results"]]))
    """,
        timeout=120,
    )
    assert json.loads(result.output) == [
        ["", 0, "Home"],
        ["guide/intro", 1, "Intro"],
        ["guide/setup", 1, "Setup"],
        ["guide/", 1, "Guide"],
        ["guide/advanced", 2, "Advanced"],
        ["guide/deep", 3, "Deep"],
    ]
    assert result.tool_calls_made == 1


# -- through Firecrawl's crawl ---------------------------------------------------------------------------


def test_crawl_through_firecrawl(make_crawl: Callable[..., Crawl], firecrawl: FakeFirecrawl,
                                 firecrawl_settings: dict[str, Any]) -> None:
    crawl = make_crawl(**firecrawl_settings, **{"web.extract": "auto", "policy.allowed_domains": []})
    reply = crawl(star_url("Deneb"), max_pages=5, include="/*", fresh=True)
    result = reply["result"]
    assert result["source"] == "firecrawl" and result["pages"] == 5 and result["failed"] == 0
    first, *rest = result["results"]
    assert first["url"] == star_url("Deneb") and first["depth"] == 0 and first["title"] == "Deneb — star survey"
    assert [page["depth"] for page in rest] == sorted(page["depth"] for page in rest) and rest[0]["depth"] == 1
    assert all(page["links"] and "light-years" in page["content"] for page in result["results"])
    start, *polls = [r for r in firecrawl.requests if r["path"].startswith("/v2/crawl")]
    assert start["method"] == "POST" and start["authorization"] == f"Bearer {API_KEY}"
    body = start["body"]
    assert body["url"] == star_url("Deneb") and body["limit"] == 5 and body["includePaths"] == ["^/[^/]*$"]
    assert body["crawlEntireDomain"] is True and body["allowExternalLinks"] is False
    assert body["scrapeOptions"]["formats"] == ["markdown", "links"] and body["scrapeOptions"]["maxAge"] == 0
    assert polls and all(r["method"] == "GET" for r in polls)
    # The crawled pages are the session's: reading one again costs no scrape.
    again = crawl("web_extract", urls=[page["url"] for page in result["results"]])
    assert [p["content"] for p in again["result"]["results"]] == [p["content"] for p in result["results"]]
    assert "/v2/scrape" not in firecrawl.paths()


def test_a_firecrawl_crawl_past_the_deadline_is_cancelled_there(
        make_crawl: Callable[..., Crawl], firecrawl: FakeFirecrawl, firecrawl_settings: dict[str, Any]) -> None:
    firecrawl.crawl_polls = 10**6  # never finishes
    crawl = make_crawl(**firecrawl_settings, **{"web.extract": "auto", "policy.allowed_domains": []})
    with call_deadline(time.monotonic() + 1.5):
        reply = crawl(star_url("Deneb"))
    assert reply["error"]["type"] == "Timeout" and "cancelled there" in reply["error"]["message"]
    assert [r["method"] for r in firecrawl.requests][-1] == "DELETE"
    (job,) = firecrawl.crawls.values()
    assert job.status == "cancelled"


@pytest.mark.parametrize(("glob", "path", "matches"), [
    ("/docs/**", "/docs/a/b.html", True), ("/docs/**", "/blog/docs/a", False),
    ("*.html", "/a/b/c.html", True), ("*.html", "/a/b/c.htm", False),
    ("/a/{b,c}/*.md", "/a/c/x.md", True), ("/a/{b,c}/*.md", "/a/c/d/x.md", False),
    ("/p[0-9].html", "/p7.html", True), ("**/guide/*", "/x/y/guide/z", True),
])
def test_include_globs_mean_the_same_to_firecrawl(glob: str, path: str, matches: bool) -> None:
    """A glob and the regex Firecrawl gets for it agree."""
    patterns = PathPatterns([glob])
    assert patterns.matches(path) is matches
    (regex,) = patterns.as_regexes()
    assert (re.search(regex, path) is not None) is matches
