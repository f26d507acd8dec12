"""robots.txt read as RFC 9309 says: our group or `*`, the longest matching rule, Allow winning a
tie, `*` and `$` in paths (the cases the standard library's first-match parser reads wrong)."""

from __future__ import annotations

import pytest

from herald.web.fetch import USER_AGENT
from herald.web.robots import Robots, product_token

SITE = "https://docs.example.org"
ROBOTS = """
# comments and blank lines are nothing
User-agent: *
Disallow: /private
Disallow: /*.pdf$
Allow: /private/press
Disallow: /search?

User-agent: OtherBot
User-agent: HeraldAgent
Disallow: /drafts/
Allow: /drafts/published-*
Disallow:
"""


@pytest.mark.parametrize(("agent", "path", "allowed"), [
    ("SomeBot", "/", True),
    ("SomeBot", "/private/notes", False),
    ("SomeBot", "/private/press/2026", True),  # the longer Allow wins over the earlier Disallow
    ("SomeBot", "/papers/a.pdf", False),
    ("SomeBot", "/papers/a.pdf?download=1", True),  # $ anchors the end
    ("SomeBot", "/search?q=x", False),
    ("SomeBot", "/search", True),
    ("SomeBot", "/robots.txt", True),
    ("HeraldAgent", "/private/notes", True),  # our own group replaces the * group
    ("heraldagent", "/drafts/x", False),  # matched case-insensitively
    ("HeraldAgent", "/drafts/published-1", True),
    ("OtherBot", "/drafts/x", False),  # a group may name several agents
])
def test_rules(agent: str, path: str, allowed: bool) -> None:
    assert Robots.parse(ROBOTS, agent).allows(SITE + path) is allowed


def test_a_tie_goes_to_allow_and_no_rules_allow_everything() -> None:
    tie = Robots.parse("User-agent: *\nDisallow: /page\nAllow: /page\n", "x")
    assert tie.allows(SITE + "/page")
    assert Robots.parse("", "x").allows(SITE + "/anything")
    assert Robots.parse("User-agent: x\nDisallow:\n\nUser-agent: *\nDisallow: /\n", "x").allows(SITE + "/a")


def test_product_token() -> None:
    assert product_token(USER_AGENT) == "HeraldAgent"
    assert product_token("ExampleResearchBot/2.0 (+mailto:crawler@example.org)") == "ExampleResearchBot"
    assert product_token("Mozilla/5.0 (X11) AppleWebKit/537.36 Chrome/120.0 Safari/537.36") == "Mozilla"
