"""robots.txt read as RFC 9309 says (web_crawl asks it before following a link to a page).

The group for our product token (from the User-Agent: `HeraldAgent` for Herald's own), else the
`*` group; of its rules the longest matching path pattern decides, `Allow` winning a tie; `*`
matches any run of characters and a final `$` anchors the end. The standard library's
robotparser takes the first matching rule instead, which reads many real files wrong
(`Allow: /docs/public` under `Disallow: /docs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309 2.5: at least 500 KiB must be parsed; the rest may be ignored
# Product tokens that name browsers' lineage, not the crawler (a User-Agent that copies a browser's)
BROWSER_TOKENS = frozenset(
    {"mozilla", "applewebkit", "chrome", "safari", "gecko", "firefox", "khtml", "version", "edg"}
)
_TOKEN = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)/")


def product_token(user_agent: str) -> str:
    """The name robots.txt groups are matched against: the User-Agent's first product that is not
    a browser's (`HeraldAgent` in Herald's default), else its first word."""
    tokens: list[str] = _TOKEN.findall(user_agent)
    for token in tokens:
        if token.lower() not in BROWSER_TOKENS:
            return token
    words: list[str] = re.findall(r"[A-Za-z0-9_-]+", user_agent)
    return words[0] if words else "*"


@dataclass(frozen=True)
class Rule:
    allow: bool
    pattern: str
    regex: re.Pattern[str]


def _rule(allow: bool, pattern: str) -> Rule:
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    regex = ".*".join(re.escape(part) for part in body.split("*")) + ("$" if anchored else "")
    return Rule(allow, pattern, re.compile(regex))


@dataclass(frozen=True)
class Robots:
    """The rules of one site that apply to us."""

    rules: tuple[Rule, ...] = ()

    @classmethod
    def parse(cls, text: str, agent: str) -> Robots:
        ours: list[Rule] = []
        anyone: list[Rule] = []
        found_ours = False
        agents: list[str] = []
        in_rules = False  # a user-agent line after rules starts a new group
        for raw in text[:MAX_ROBOTS_BYTES].splitlines():
            line = raw.split("#", 1)[0].strip()
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key, value = key.strip().lower(), value.strip()
            if key == "user-agent":
                if in_rules:
                    agents, in_rules = [], False
                agents.append(value.lower())
                found_ours = found_ours or value.lower() == agent.lower()
            elif key in ("allow", "disallow"):
                in_rules = True
                if not value:  # "Disallow:" allows everything: no rule
                    continue
                rule = _rule(key == "allow", value)
                if agent.lower() in agents:
                    ours.append(rule)
                elif "*" in agents:
                    anyone.append(rule)
        return cls(tuple(ours if found_ours else anyone))

    def allows(self, url: str) -> bool:
        """Whether the rules let us fetch `url` (/robots.txt itself is always allowed)."""
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if path == "/robots.txt":
            return True
        best: Rule | None = None
        for rule in self.rules:
            if rule.regex.match(path) and (
                    best is None or len(rule.pattern) > len(best.pattern)
                    or (len(rule.pattern) == len(best.pattern) and rule.allow)):
                best = rule
        return best is None or best.allow


ALLOW_ALL = Robots()
DISALLOW_ALL = Robots((_rule(False, "/"),))
