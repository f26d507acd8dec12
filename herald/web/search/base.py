"""What every search provider is: where it is (`Endpoint`), the one method web_search calls
(`SearchProvider.search`), the shape of a hit, and a failure that says what to do about it.

A failure is sorted by what the caller can do (`Kind`): a refused key names the variable or
setting it came from, a rate limit says to wait, a provider that is down names its address and the
setting that holds it. The message is written for the model and reaches it unchanged.
"""

from __future__ import annotations

import enum
import html
import re
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from ...config import Settings
from ...keys import herald_environ

Hit = dict[str, str]  # {"url", "title", "description"}

TAG = re.compile(r"<[^>]{0,200}>")
SPACE = re.compile(r"\s+")


class Kind(enum.Enum):
    AUTH = "SearchAuthFailed"  # the key was refused
    QUOTA = "SearchQuotaExhausted"  # credits or the plan's limit used up: retrying will not help
    RATE = "SearchRateLimited"  # too many searches just now: wait and retry
    REQUEST = "SearchRefused"  # the provider refused this query
    DOWN = "SearchFailed"  # unreachable, or failing on its side
    SETUP = "SearchMisconfigured"  # reachable, but not answering as the provider (wrong URL, a setting there)
    TIMEOUT = "Timeout"


@dataclass(frozen=True)
class Endpoint:
    """A configured provider: its name (as in web.search_provider), its title for messages, the
    address requests go to (`base`, which may carry credentials) and the one shown (`url`), its
    key and where each came from, so an error can name the variable or setting to fix."""

    provider: str
    title: str
    url: str
    base: str = field(repr=False)
    key: str | None = field(default=None, repr=False)
    key_from: str = ""  # "BRAVE_API_KEY (Herald's environment)", "the setting web.brave_api_key"
    key_elsewhere: str = ""  # how else a key could be set: " (or ...)", or where to set one when none is
    url_from: str = ""  # what sets the address: "the setting web.searxng_url"


class SearchProvider(Protocol):
    """One search backend. `search` returns at most `limit` hits, waiting at most `timeout`
    seconds for any one step of its request; it raises SearchFailure, never anything else."""

    endpoint: Endpoint
    max_results: int | None  # the most one search returns (None: no fixed cap)

    def search(self, query: str, limit: int, timeout: float) -> list[Hit]: ...


class SearchFailure(Exception):
    """A search that failed; str() is the whole message for the model, `error_type` its type."""

    def __init__(
        self, endpoint: Endpoint, kind: Kind, detail: str, advice: str = "", status: int | None = None
    ) -> None:
        self.endpoint, self.kind, self.detail, self.status = endpoint, kind, detail.strip().rstrip("."), status
        self.advice = advice or default_advice(endpoint, kind)
        super().__init__(redacted(f"the search failed at {endpoint.url}: {self.detail}. {self.advice}", endpoint))

    @property
    def error_type(self) -> str:
        return self.kind.value


def default_advice(endpoint: Endpoint, kind: Kind, retry_after: str | None = None) -> str:
    title = endpoint.title
    if kind is Kind.AUTH and not endpoint.key_from:
        return f"{title} wants an API key: set one in {endpoint.key_elsewhere}."
    if kind is Kind.AUTH:
        return f"{title} refused the API key from {endpoint.key_from}: set a valid key there{endpoint.key_elsewhere}."
    if kind is Kind.QUOTA:
        return (f"The {title} account's credits or plan limit are used up: searching again will not help "
                "until the user tops it up. Tell the user; work with what you have.")
    if kind is Kind.RATE:
        wait = f"wait {retry_after} s" if retry_after else "wait a little"
        whose = "this key" if endpoint.key else "Herald's searches"
        return f"{title} is rate limiting {whose}: {wait} and search again, fewer searches at a time."
    if kind is Kind.REQUEST:
        return f"{title} refused this query: make it shorter and plainer, then search again."
    if kind is Kind.SETUP:
        return f"What answers there is not {title}'s API: check {endpoint.url_from}."
    if kind is Kind.TIMEOUT:
        return "Try again, or with a shorter query."
    return f"{title} is down or unreachable at {endpoint.url}: try again later, or check {endpoint.url_from}."


def keyed_endpoint(
    settings: Settings, provider: str, title: str, default_url: str, env: tuple[str, ...]
) -> Endpoint | None:
    """A provider configured by an API key: `web.<provider>_api_key`, else the first of `env` set
    in Herald's environment (keys are moved out of os.environ at start: herald/keys.py); its
    address `web.<provider>_api_url`, else `default_url`. None when no key is set."""
    web = settings.web
    key_setting, url_setting = f"web.{provider}_api_key", f"web.{provider}_api_url"
    variables = " or ".join(env)
    key = getattr(web, f"{provider}_api_key").strip()
    key_from, elsewhere = f"the setting {key_setting}", f" (or remove it to use {variables} from Herald's environment)"
    if not key:
        environ = herald_environ()
        name = next((n for n in env if environ.get(n)), None)
        if name is None:
            return None
        key, key_from, elsewhere = (
            environ[name],
            f"{name} (Herald's environment)",
            f" (or in the setting {key_setting}, which comes first)",
        )
    url = getattr(web, f"{provider}_api_url").strip()
    url_from = (
        f"the setting {url_setting}" if url else f"that Herald's machine can reach {default_url} (or set {url_setting})"
    )
    url = url or default_url
    return Endpoint(provider, title, shown_url(url), base=url.rstrip("/"), key=key, key_from=key_from,
                    key_elsewhere=elsewhere, url_from=url_from)


def redacted(text: str, endpoint: Endpoint) -> str:
    """`text` without the endpoint's secrets, whatever echoed them (an error body quoting the key,
    an exception quoting the URL with its password)."""
    password = urlsplit(endpoint.base).password
    for secret in (endpoint.key, password):
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def shown_url(url: str) -> str:
    """`url` without credentials (user:password@) and without a trailing slash: what messages show."""
    parts = urlsplit(url.strip())
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")).rstrip("/")


def plain(text: object) -> str:
    """A provider's snippet as plain text: markup such as Brave's <strong> dropped, entities
    decoded, whitespace collapsed."""
    if not isinstance(text, str):
        return ""
    return SPACE.sub(" ", html.unescape(TAG.sub("", text))).strip()


def hit(url: object, title: object, description: object) -> Hit | None:
    """One result in web_search's shape, or None when it has no http(s) URL to give."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    return {"url": url, "title": plain(title), "description": plain(description)}
