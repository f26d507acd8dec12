"""Web research in one execute_code run: search, read ten pages at once, cross-reference."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from herald import Runtime
from tests.fakes.firecrawl import FakeFirecrawl
from tests.fixtures.browsers import ARTICLE_FACTS, LocalWebApp
from tests.runtime._helpers import run_ok

from .conftest import see_also

RESEARCH = """
import json, re
from hermes_tools import web_search, web_extract, parallel

hits = web_search("star survey", limit=10)["results"]
replies = parallel([(web_extract, [hit["url"]]) for hit in hits])  # ten pages at once

distance, cited_by = {}, {}
for reply in replies:
    page = reply["results"][0]
    star = page["title"].split(" — ")[0]
    distance[star] = int(re.search(r"Distance: (\\d+) light-years", page["content"]).group(1))
    for other in re.search(r"See also: (.*)\\.", page["content"]).group(1).split(", "):
        cited_by.setdefault(other, []).append(star)

print(json.dumps({
    "pages": len(distance),
    "nearby": sorted(s for s, d in distance.items() if d < 100),
    "cited_by": {s: sorted(v) for s, v in cited_by.items()},
    "unknown_citations": sorted(set(cited_by) - set(distance)),
}))
"""


def expected_citations() -> dict[str, list[str]]:
    cited: dict[str, list[str]] = {}
    for i, (star, _, _) in enumerate(ARTICLE_FACTS):
        for other in see_also(i):
            cited.setdefault(other, []).append(star)
    return {s: sorted(v) for s, v in cited.items()}


def test_research_script_through_firecrawl(
    make_runtime: Callable[..., Runtime], firecrawl: FakeFirecrawl, firecrawl_settings: dict[str, Any]
) -> None:
    runtime = make_runtime(overrides=firecrawl_settings)
    result = run_ok(runtime, RESEARCH, timeout=120)
    out = json.loads(result.output)
    assert out["pages"] == 10
    assert out["nearby"] == sorted(s for s, _, d in ARTICLE_FACTS if d < 100)
    assert out["cited_by"] == expected_citations() and out["unknown_citations"] == []
    assert result.tool_calls_made == 11
    assert sorted(firecrawl.paths()) == ["/v2/scrape"] * 10 + ["/v2/search"]


def test_keyless_extract_script_against_local_pages(
    make_runtime: Callable[..., Runtime], web_app: LocalWebApp
) -> None:
    runtime = make_runtime()
    urls = [f"{web_app.url}/article/{n}" for n in range(1, 11)]
    result = run_ok(runtime, f"""
        import json, re
        from hermes_tools import web_extract
        reply = web_extract({urls!r})
        found = {{}}
        for page in reply["results"]:
            match = re.search(r"(\\w+) is an? ([\\w -]+?) about (\\d+) light-years", page["content"])
            found[match.group(1)] = [match.group(2), int(match.group(3))]
        print(json.dumps({{"source": reply["source"], "failed": reply["failed"], "found": found}}))
    """, timeout=120)
    out = json.loads(result.output)
    assert out["source"] == "direct" and out["failed"] == 0
    assert out["found"] == {star: [kind, distance] for star, kind, distance in ARTICLE_FACTS}
    assert result.tool_calls_made == 1
