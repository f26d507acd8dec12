"""Where web and browser tools may go: never to link-local or cloud metadata addresses, and only
to `policy.allowed_domains` when that list is set.

A URL is checked as the tool will read it: no scheme means https (the browser's and web_extract's
convention); only http and https (and about:blank) are web addresses. The host is normalised as
a browser does: IPv4 in decimal, hex or short forms (`2852039166`, `0xa9fea9fe`) is the address
it spells, IPv4-mapped IPv6 is its IPv4 address. Names are not resolved here: `WebAddressPolicy`
is how the tools apply the same checks to every hop they take and to every address a name
resolves to (herald/webguard.py).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

METADATA_NAMES = frozenset({
    "metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal",
    "metadata.azure.com", "metadata.oraclecloud.com",
})
_METADATA_ADDRESSES = (
    ipaddress.ip_network("169.254.0.0/16"),  # link-local: AWS, GCP, Azure, OpenStack metadata
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS IMDS over IPv6
    ipaddress.ip_network("100.100.100.200/32"),  # Alibaba Cloud metadata
)
WEB_SCHEMES = ("http", "https")


def url_host(url: str) -> tuple[str, str]:
    """(scheme, host) of `url` as the tools read it; host is "" when there is none."""
    text = url.strip()
    if "://" not in text and not text.lower().startswith(("about:", "data:", "javascript:", "file:", "blob:")):
        text = "https://" + text
    parts = urlsplit(text)
    host = (parts.hostname or "").rstrip(".").lower()
    return parts.scheme.lower(), host


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        try:  # what inet_aton accepts, browsers and curl accept too: 2852039166, 0xa9.0xfe.1, 169.254.43518
            address = ipaddress.ip_address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def metadata_refusal(host: str) -> str | None:
    """Why `host` is never reachable from a tool (outside the full profile), or None."""
    if host in METADATA_NAMES:
        return f"{host} is a cloud metadata service"
    address = _address(host)
    if address is not None and any(address in net for net in _METADATA_ADDRESSES):
        return f"{host} is a link-local / cloud metadata address"
    return None


def domain_matches(host: str, patterns: Sequence[str]) -> bool:
    """`host` is one of `patterns` or below one (`example.com` and `*.example.com` both cover
    `api.example.com`; `*` covers everything)."""
    for pattern in patterns:
        name = pattern.strip().lower().rstrip(".")
        if name.startswith("*."):
            name = name[2:]
        elif name == "*":
            return True
        if host == name or host.endswith("." + name):
            return True
    return False


FULL_PROFILE_HINT = "tools never reach these outside the full profile"


@dataclass(frozen=True)
class WebRefusal:
    """Why a URL may not be reached: the rule that decided ("web addresses", "metadata
    addresses", "policy.allowed_domains") and what is wrong, naming the host."""

    rule: str
    reason: str


@dataclass(frozen=True)
class WebAddressPolicy:
    """The one URL check of web and browser tools: the Gate applies it to their URL arguments,
    the tools to every further hop they take (redirects, a page's frames and subresources) and to
    every address a name resolves to (herald/webguard.py `WebPolicy`)."""

    allowed_domains: tuple[str, ...] = ()

    def refusal(self, url: str) -> WebRefusal | None:
        """Why `url` may not be reached, or None (about:blank is always fine)."""
        try:
            scheme, host = url_host(url)
        except ValueError as exc:  # urlsplit: a bad IPv6 literal, ...
            return WebRefusal("web addresses", f"{url[:100]!r} is not a valid URL ({exc})")
        if scheme not in WEB_SCHEMES:
            if url.strip().lower() == "about:blank":
                return None
            return WebRefusal("web addresses", f"{url[:100]!r} is not an http(s) address")
        reason = metadata_refusal(host)
        if reason:
            return WebRefusal("metadata addresses", f"{reason}; {FULL_PROFILE_HINT}")
        if self.allowed_domains and not domain_matches(host, self.allowed_domains):
            return WebRefusal(
                "policy.allowed_domains",
                f"{host or repr(url[:100])} is not in policy.allowed_domains ({', '.join(self.allowed_domains)})",
            )
        return None

    def url_refusal(self, url: str) -> str | None:
        refused = self.refusal(url)
        return None if refused is None else refused.reason

    def address_refusal(self, address: str) -> str | None:
        reason = metadata_refusal(address)
        return f"{reason}; {FULL_PROFILE_HINT}" if reason else None
