"""A page is fetched once per session: web_extract (keyless) keeps what it fetched in the
session's HTTP cache, honouring the server's caching headers, and asks again only when they say
so, or when the call says `fresh=True`. Every call goes through a Dispatcher, as a model's or a
script's would; the site counts the requests it gets and shows their headers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from email.utils import formatdate
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.policy import Policy
from herald.runtime.dispatcher import Dispatcher
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext
from herald.web.cache import ENTRY_OVERHEAD
from tests.fakes.firecrawl import FakeFirecrawl
from tests.runtime._helpers import run_ok
from tests.web.site import Page, Site, html

from .conftest import star_url

Extract = Callable[..., dict[str, Any]]


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    yield server
    server.close()


class Session:
    """One session's ToolContext; `dispatcher(**policy settings)` puts a policy in front of it."""

    def __init__(self, backend: LocalBackend, settings: Settings) -> None:
        self.settings = settings
        self.ctx = ToolContext(backend=backend, settings=settings)
        self.current = self.dispatcher()

    def dispatcher(self, **overrides: Any) -> Dispatcher:
        self.current = Dispatcher(default_registry(), self.ctx,
                                  policy=Policy.from_settings(self.settings.with_overrides(overrides)))
        return self.current

    def extract(self, *urls: str, **args: Any) -> list[dict[str, Any]]:
        reply = self.current.call_direct("web_extract", {"urls": list(urls), **args})
        assert "result" in reply, reply
        results: list[dict[str, Any]] = reply["result"]["results"]
        return results

    def content(self, url: str, **args: Any) -> str:
        (result,) = self.extract(url, **args)
        assert "content" in result, result
        text: str = result["content"]
        return text


@pytest.fixture
def make_session(local_backend: LocalBackend, settings: Settings) -> Iterator[Callable[..., Session]]:
    made: list[Session] = []

    def factory(**overrides: Any) -> Session:
        session = Session(local_backend, settings.with_overrides({"web.extract": "direct", **overrides}))
        made.append(session)
        return session

    yield factory
    for session in made:
        session.ctx.close()


def test_a_page_is_fetched_once_per_session(make_session: Callable[..., Session], site: Site) -> None:
    url = site.add("/plain", html("Plain", "A page that says nothing about caching."))
    session = make_session()
    first = session.content(url)
    assert "says nothing about caching" in first
    assert session.content(url) == first
    assert [r["content"] for r in session.extract(url, url)] == [first, first]
    assert site.hits["/plain"] == 1
    # Another session has a cache of its own.
    assert make_session().content(url) == first
    assert site.hits["/plain"] == 2


def test_max_age_is_honoured_and_expires(make_session: Callable[..., Session], site: Site) -> None:
    long = site.add(
        "/long", Page(html("Long", "Fresh for an hour."), headers={"Cache-Control": "public, max-age=3600"})
    )
    short = site.add("/short", Page(html("Short", "Fresh for a second."), headers={"Cache-Control": "max-age=1"}))
    aged = site.add(
        "/aged", Page(html("Aged", "Arrived already old."), headers={"Cache-Control": "max-age=60", "Age": "60"})
    )
    session = make_session()
    for url in (long, short, aged):
        session.content(url)
    time.sleep(1.5)  # /short is now past its max-age, whatever the scheduling
    for url in (long, short, aged):
        session.content(url)
    assert (site.hits["/long"], site.hits["/short"], site.hits["/aged"]) == (1, 2, 2)


def test_expires_header(make_session: Callable[..., Session], site: Site) -> None:
    now = time.time()
    future = site.add("/future", Page(html("Future"), headers={"Date": formatdate(now, usegmt=True),
                                                                "Expires": formatdate(now + 3600, usegmt=True)}))
    past = site.add("/past", Page(html("Past"), headers={"Date": formatdate(now, usegmt=True),
                                                          "Expires": formatdate(now - 60, usegmt=True)}))
    invalid = site.add("/invalid", Page(html("Invalid"), headers={"Expires": "0"}))
    session = make_session()
    for _ in range(2):
        for url in (future, past, invalid):
            session.content(url)
    assert (site.hits["/future"], site.hits["/past"], site.hits["/invalid"]) == (1, 2, 2)


def test_a_stale_page_is_revalidated_with_its_etag(make_session: Callable[..., Session], site: Site) -> None:
    page = Page(html("Tagged", "Version one."), headers={"Cache-Control": "no-cache"}, etag='"v1"')
    url = site.add("/tagged", page)
    session = make_session()
    assert "Version one." in session.content(url)
    assert "Version one." in session.content(url)  # a 304: the stored page
    assert site.hits["/tagged"] == 2 and site.not_modified == 1
    first, second = site.headers_of("/tagged")
    assert "if-none-match" not in first and second["if-none-match"] == '"v1"'
    # The page changes: its new ETag no longer matches, and the new version is served.
    site.add("/tagged", Page(html("Tagged", "Version two."), headers={"Cache-Control": "no-cache"}, etag='"v2"'))
    assert "Version two." in session.content(url)
    assert site.not_modified == 1
    assert "Version two." in session.content(url)
    assert site.headers_of("/tagged")[-1]["if-none-match"] == '"v2"' and site.not_modified == 2


def test_last_modified_revalidation_and_a_304_that_extends_freshness(
        make_session: Callable[..., Session], site: Site) -> None:
    stamp = "Wed, 21 Oct 2026 07:28:00 GMT"
    url = site.add("/dated", Page(html("Dated", "Written once."), headers={"Cache-Control": "max-age=0"},
                                  last_modified=stamp))
    session = make_session()
    session.content(url)
    # The 304 says the page is now fresh for an hour: the next call makes no request.
    site.pages["/dated"].headers = {"Cache-Control": "max-age=3600"}
    assert "Written once." in session.content(url)
    assert site.headers_of("/dated")[-1]["if-modified-since"] == stamp
    assert "Written once." in session.content(url)
    assert site.hits["/dated"] == 2 and site.not_modified == 1


def test_no_store_is_never_kept(make_session: Callable[..., Session], site: Site) -> None:
    url = site.add("/secret", Page(html("Secret"), headers={"Cache-Control": "private, no-store"}, etag='"s"'))
    vary = site.add("/vary", Page(html("Varies"), headers={"Vary": "*"}))
    session = make_session()
    for _ in range(3):
        session.content(url)
        session.content(vary)
    assert site.hits["/secret"] == 3 and site.hits["/vary"] == 3
    assert all("if-none-match" not in headers for headers in site.headers_of("/secret"))


def test_fresh_true_fetches_anew_and_updates_the_cache(make_session: Callable[..., Session], site: Site) -> None:
    url = site.add("/news", Page(html("News", "Old news."), headers={"Cache-Control": "max-age=3600"}, etag='"a"'))
    session = make_session()
    assert "Old news." in session.content(url)
    site.add("/news", Page(html("News", "Breaking news."), headers={"Cache-Control": "max-age=3600"}, etag='"b"'))
    assert "Old news." in session.content(url)  # fresh in the cache: no request
    assert "Breaking news." in session.content(url, fresh=True)
    fresh_request = site.headers_of("/news")[-1]
    assert fresh_request.get("cache-control") == "no-cache" and "if-none-match" not in fresh_request
    assert "Breaking news." in session.content(url)  # the cache holds the new version
    assert site.hits["/news"] == 2


def test_a_cached_redirect_to_a_refused_host_is_refused(make_session: Callable[..., Session], site: Site) -> None:
    """The policy's check comes before the cache: hops cached under an open policy are not
    served once the session's policy refuses them, and the refused one is never requested."""
    target = site.add("/target", Page(html("Target", "Behind a permanent redirect.")))
    start = site.add("/moved", Page(status=301, location=target))
    session = make_session()
    session.dispatcher(**{"policy.profile": "full"})
    assert "Behind a permanent redirect." in session.content(site.url("/moved", host="localhost"))
    assert "Behind a permanent redirect." in session.content(site.url("/moved", host="localhost"))
    assert site.hits["/moved"] == 1 and site.hits["/target"] == 1  # both hops came from the cache
    session.dispatcher(**{"policy.allowed_domains": ["localhost"]})
    (result,) = session.extract(site.url("/moved", host="localhost"))
    assert (
        "refused the redirect from" in result["error"]
        and "127.0.0.1 is not in policy.allowed_domains" in result["error"]
    )
    reply = session.current.call_direct("web_extract", {"urls": [start]})
    assert "127.0.0.1 is not in policy.allowed_domains" in reply["error"]["message"]  # the Gate, on the argument
    # /moved was asked again (entries are kept apart by the policy they were fetched under);
    # the refused hop never reached the server, nor came from the cache.
    assert site.hits["/moved"] == 2 and site.hits["/target"] == 1


def test_a_page_fetched_without_address_checks_is_not_served_with_them(
        make_session: Callable[..., Session], site: Site) -> None:
    """The full profile checks no addresses; a page it fetched is not served to a policy that
    would check the address it came from."""
    url = site.add("/page", Page(html("Page"), headers={"Cache-Control": "max-age=3600"}))
    session = make_session()
    session.dispatcher(**{"policy.profile": "full"})
    session.content(url)
    session.content(url)
    session.dispatcher()  # the default profile
    session.content(url)
    session.content(url)
    assert site.hits["/page"] == 2


def test_user_agent_reaches_the_server(make_session: Callable[..., Session], site: Site) -> None:
    url = site.add("/ua", html("Agent"))
    make_session().content(url)
    make_session(**{"web.user_agent": "ExampleResearchBot/2.0 (+mailto:crawler@example.org)"}).content(url)
    default, custom = (headers["user-agent"] for headers in site.headers_of("/ua"))
    assert "HeraldAgent/" in default
    assert custom == "ExampleResearchBot/2.0 (+mailto:crawler@example.org)"


def test_one_connection_serves_the_sessions_calls_and_closes_with_it(
        make_session: Callable[..., Session], site: Site) -> None:
    urls = [site.add(f"/p{n}", html(f"Page {n}")) for n in range(5)]
    session = make_session()
    for url in urls:
        session.content(url)
    assert site.connections_opened == 1
    session.ctx.close()
    assert site.wait_for(lambda: site.connections_open == 0, 10), "the session's connection outlived it"
    (result,) = session.extract(urls[0])  # the session is over, its cache too
    assert "the session has ended" in result["error"]


def test_per_host_limit_holds_across_parallel_calls(make_session: Callable[..., Session], site: Site) -> None:
    """Three web_extract calls at once, four pages each, on one host limited to two requests in
    flight: the site never sees a third; another host is not held up by this one's limit."""
    for n in range(12):
        site.add(f"/held/{n}", Page(html(f"Held {n}"), hold=True))
    site.add("/other", html("Other host"))
    session = make_session(**{"web.max_per_host": 2})
    batches = [[site.url(f"/held/{4 * b + i}", host="localhost") for i in range(4)] for b in range(3)]
    replies: list[list[dict[str, Any]]] = [[] for _ in batches]

    def run(index: int) -> None:
        replies[index] = session.extract(*batches[index])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        assert site.wait_for(lambda: site.in_flight == 2, 30), f"in flight: {site.in_flight}"
        # Were the limit not kept, the other ten requests would arrive now.
        assert not site.wait_for(lambda: site.in_flight > 2, 1.5), f"{site.in_flight} requests at once"
        assert "Other host" in session.content(site.url("/other"))  # 127.0.0.1: another origin
    finally:
        site.release()
        for thread in threads:
            thread.join(60)
    assert site.most_in_flight == 2
    assert all("content" in page for batch in replies for page in batch), replies
    assert sum(site.hits[f"/held/{n}"] for n in range(12)) == 12


def test_parallel_calls_for_one_page_fetch_it_once(make_session: Callable[..., Session], site: Site) -> None:
    url = site.add("/popular", Page(html("Popular"), hold=True))
    session = make_session()
    contents: list[str] = []
    threads = [threading.Thread(target=lambda: contents.append(session.content(url))) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        assert site.wait_for(lambda: site.in_flight == 1, 30)
        assert not site.wait_for(lambda: site.in_flight > 1, 1.0)
    finally:
        site.release()
        for thread in threads:
            thread.join(60)
    assert len(contents) == 4 and len(set(contents)) == 1
    assert site.hits["/popular"] == 1


def test_a_runtimes_scripts_share_one_cache(make_runtime: Callable[..., Runtime], site: Site) -> None:
    """parallel() calls in one script, and the runs after it, fetch each page once: the cache
    lives with the Runtime's session, not with a call or a run."""
    urls = [site.add(f"/shared/{n}", html(f"Shared {n}", f"Shared page number {n}.")) for n in range(3)]
    runtime = make_runtime(overrides={"web.extract": "direct"})
    script = f"""
        from hermes_tools import web_extract, parallel
        replies = parallel([(web_extract, [url]) for url in {urls * 3!r}])
        print(sorted({{r["results"][0]["content"].splitlines()[-1] for r in replies}}))
    """
    first = run_ok(runtime, script, timeout=120)
    assert first.output.strip() == str([f"Shared page number {n}." for n in range(3)])
    run_ok(runtime, script, timeout=120)
    assert [site.hits[f"/shared/{n}"] for n in range(3)] == [1, 1, 1]


def test_a_script_cannot_hammer_a_host(make_runtime: Callable[..., Runtime], site: Site) -> None:
    """A script's parallel() of 24 web_extract calls on one host (and its threads of its own):
    the site never sees more than web.max_per_host requests at once."""
    for n in range(24):
        site.add(f"/busy/{n}", Page(html(f"Busy {n}"), hold=True))
    runtime = make_runtime(overrides={"web.extract": "direct", "web.max_per_host": 3})
    urls = [site.url(f"/busy/{n}") for n in range(24)]
    outcome: list[Any] = []
    script = f"""
        import threading
        from hermes_tools import web_extract, parallel
        urls = {urls!r}
        extra = [threading.Thread(target=web_extract, args=([u],)) for u in urls[:4]]
        for t in extra:
            t.start()
        replies = parallel([(web_extract, [u]) for u in urls])
        for t in extra:
            t.join()
        print(sum(r["failed"] for r in replies))
    """
    worker = threading.Thread(target=lambda: outcome.append(run_ok(runtime, script, timeout=120)))
    worker.start()
    try:
        assert site.wait_for(lambda: site.in_flight == 3, 60), f"in flight: {site.in_flight}"
        assert not site.wait_for(lambda: site.in_flight > 3, 1.5), f"{site.in_flight} requests at once"
    finally:
        site.release()
        worker.join(120)
    assert outcome and outcome[0].output.strip() == "0"
    assert site.most_in_flight == 3


def test_the_cache_is_bounded_least_recently_used_out(make_session: Callable[..., Session], site: Site) -> None:
    """web.cache_max_bytes bounds the session's cache: past it the page used longest ago goes,
    and a page larger than a quarter of it is never kept."""
    filler = "Words to fill the page. " * 150
    for name in "abcde":
        site.add(f"/{name}", html(name.upper(), filler))
    site.add("/big", html("Big", filler * 5))
    entry = len(site.pages["/a"].body) + 2 * len(site.url("/a")) + ENTRY_OVERHEAD  # what one page costs it
    session = make_session(**{"web.cache_max_bytes": 4 * entry + entry // 2})  # room for four
    for name in "abcdae":  # "a" used again, so "b" is the oldest when "e" comes
        session.content(site.url(f"/{name}"))
    for name in ["a", "c", "d", "e", "b", "big", "big"]:
        session.content(site.url(f"/{name}"))
    hits = {name: site.hits[f"/{name}"] for name in ["a", "b", "c", "d", "e", "big"]}
    assert hits == {"a": 1, "b": 2, "c": 1, "d": 1, "e": 1, "big": 2}


def test_firecrawl_scrapes_once_per_session_unless_fresh(
        make_web: Callable[..., Any], firecrawl: FakeFirecrawl, firecrawl_settings: dict[str, Any]) -> None:
    """Through Firecrawl a page is scraped once per session too (each scrape costs a credit);
    fresh=True scrapes it again, past Firecrawl's own cache (maxAge 0)."""
    call = make_web(firecrawl_settings)
    urls = [star_url("Capella"), star_url("Deneb")]
    first = call("web_extract", urls=urls)
    again = call("web_extract", urls=[*urls, urls[0]])
    assert [p["content"] for p in again["results"][:2]] == [p["content"] for p in first["results"]]
    scrapes = [r for r in firecrawl.requests if r["path"] == "/v2/scrape"]
    assert len(scrapes) == 2 and all(r["body"].get("maxAge") != 0 for r in scrapes)
    call("web_extract", urls=urls[:1], fresh=True)
    scrapes = [r for r in firecrawl.requests if r["path"] == "/v2/scrape"]
    assert len(scrapes) == 3 and scrapes[-1]["body"]["maxAge"] == 0
    make_web(firecrawl_settings)("web_extract", urls=urls[:1])  # another session
    assert len([r for r in firecrawl.requests if r["path"] == "/v2/scrape"]) == 4
