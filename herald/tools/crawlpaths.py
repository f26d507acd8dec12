"""web_crawl's `include` patterns on a URL's path: globs read as search_files reads them (`*` and
`?` within a path segment, `**` across, `{a,b}`, `[a-z]`; one without `/` matches the last
segment at any depth), or regexes after `re:` (searched); and the same patterns as regexes for
Firecrawl's `includePaths`, which are regexes on the path.
"""

from __future__ import annotations

import re

from .._sandbox.search.globs import Glob, GlobError, compile_glob, expand_braces
from .registry import ToolError


def glob_regex(glob: str) -> str:
    """A regex on a URL path (leading `/`) matching what `glob` matches, for Firecrawl's
    includePaths: `**` any run, `*` and `?` within a segment, classes and braces kept."""
    alternatives = []
    for alternative in expand_braces(glob):
        out, i = [], 0
        body = alternative.lstrip("/")
        while i < len(body):
            if body.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            elif body.startswith("**", i):
                out.append(".*")
                i += 2
            elif body[i] == "*":
                out.append("[^/]*")
                i += 1
            elif body[i] == "?":
                out.append("[^/]")
                i += 1
            elif body[i] == "[":
                end = body.find("]", i + 2)
                if end < 0:
                    out.append(re.escape(body[i:]))
                    break
                out.append("[" + body[i + 1:end].replace("!", "^", 1 if body[i + 1] == "!" else 0) + "]")
                i = end + 1
            else:
                out.append(re.escape(body[i]))
                i += 1
        prefix = "^/" if "/" in glob else "^(?:.*/)?"
        alternatives.append(prefix + "".join(out) + "$")
    return "|".join(alternatives)


class PathPatterns:
    """web_crawl's `include`: globs, or regexes after `re:`, on a URL's path; ToolError for a
    pattern that means nothing."""

    def __init__(self, patterns: list[str]) -> None:
        self.globs: list[Glob] = []
        self.regexes: list[re.Pattern[str]] = []
        for pattern in patterns:
            if pattern.startswith("!"):
                raise ToolError(f"web_crawl: the include pattern {pattern!r} is negated; include lists what to "
                                "follow. Name the paths to crawl, e.g. '/docs/**'.")
            try:
                if pattern.startswith("re:"):
                    self.regexes.append(re.compile(pattern[3:]))
                else:
                    self.globs.append(compile_glob(pattern))
            except (GlobError, re.error) as exc:
                raise ToolError(
                    f"web_crawl: the include pattern {pattern!r} is not valid ({exc}). Use a glob such as "
                    "'/docs/**' or '*.html', or a regex after 're:', such as 're:^/blog/20[0-9]{2}/'."
                ) from None

    def matches(self, path: str) -> bool:
        return (any(glob.matches(path.lstrip("/")) for glob in self.globs)
                or any(regex.search(path) for regex in self.regexes))

    def as_regexes(self) -> list[str]:
        """The same patterns as regexes on the path, for Firecrawl's includePaths."""
        return [glob_regex(glob.text) for glob in self.globs] + [regex.pattern for regex in self.regexes]
