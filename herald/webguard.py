"""Where web and browser traffic may connect, hop by hop: the session's URL policy applied to
every address a tool is about to reach (a redirect's target, a page's frame or subresource), and
connections made only to the addresses that were checked.

The policy itself is the Gate's (herald/policy/domains.py `WebAddressPolicy`); the Dispatcher
hands it to the tools as `ToolContext.web_policy` (None: the full profile, or no policy at all).
This module sits below tools and browser so both can use it without importing the policy.

A name is resolved here, every address it resolves to is checked (one link-local answer refuses
the name: DNS rebinding to 169.254.169.254), and the socket is connected to one of those checked
addresses, so a second, different answer from the resolver cannot be what is reached.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any, Protocol

SockAddr = tuple[Any, ...]


class WebPolicy(Protocol):
    """The session's rules for where web and browser tools may go."""

    def url_refusal(self, url: str) -> str | None:
        """Why `url` may not be fetched (naming the host and the rule), or None."""

    def address_refusal(self, address: str) -> str | None:
        """Why the IP address `address` may not be connected to (naming the rule), or None."""


class Refused(Exception):
    """A hop the policy refuses; the message names the host and the rule."""


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def resolve(host: str, port: int, timeout: float | None) -> list[tuple[int, SockAddr]]:
    """(family, sockaddr) for each address of `host`, the resolver bounded by `timeout` (it has no
    timeout of its own: it runs on a thread that is left behind when the time is up)."""
    if _literal(host) is not None:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        return [(family, sockaddr) for family, _, _, _, sockaddr in infos]
    answer: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            answer["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            answer["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="herald-resolve", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"resolving {host} took longer than {timeout:g} s")
    if "error" in answer:
        raise answer["error"]
    return [(family, sockaddr) for family, _, _, _, sockaddr in answer["infos"]]


def checked_addresses(host: str, port: int, policy: WebPolicy | None, timeout: float | None) -> list[tuple[int, SockAddr]]:
    """The addresses of `host` that a connection may use; Refused when any of them is one the
    policy never allows (a name that also resolves to a metadata address is refused whole)."""
    found = resolve(host, port, timeout)
    if policy is not None:
        for _, sockaddr in found:
            reason = policy.address_refusal(str(sockaddr[0]))
            if reason is not None:
                raise Refused(reason if _literal(host) is not None else f"{host} resolves to {sockaddr[0]}: {reason}")
    return found


def connect_checked(host: str, port: int, policy: WebPolicy | None, timeout: float | None) -> socket.socket:
    """A TCP connection to `host`:`port` made to an address that passed the policy."""
    end = None if timeout is None else time.monotonic() + timeout
    last: OSError | None = None
    for family, sockaddr in checked_addresses(host, port, policy, timeout):
        left = None if end is None else max(0.01, end - time.monotonic())
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(left)
            sock.connect(sockaddr)
            sock.settimeout(None)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"{host} has no address to connect to")
