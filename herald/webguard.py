"""Where web and browser traffic may connect, hop by hop: the session's URL policy applied to
every address a tool is about to reach (a redirect's target, a page's frame or subresource), and
connections made only to the addresses that were checked.

The policy itself is the Gate's (herald/policy/domains.py `WebAddressPolicy`); the Dispatcher
hands it to the tools as `ToolContext.web_policy` (None: the full profile, or no policy at all).
This module sits below tools and browser so both can use it without importing the policy.

A name is resolved here, every address it resolves to is checked (one link-local answer refuses
the name: DNS rebinding to 169.254.169.254), and the socket is connected to one of those checked
addresses, so a second, different answer from the resolver cannot be what is reached.

The same holds for connections a backend makes (`Backend.open_tcp`, with `browser.network =
"backend"`): the name is resolved on the backend, each address it has there is checked here
(`address_check`), and the backend connects to one of those addresses (`open_checked`).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable
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


def checked_addresses(
    host: str, port: int, policy: WebPolicy | None, timeout: float | None
) -> list[tuple[int, SockAddr]]:
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
    """A TCP connection to `host`:`port` made here, to an address that passed the policy."""
    return open_checked(host, port, timeout, address_check(host, policy), resolve_here, connect_here)


# -- connections made by a backend (its network: its loopback, its names) ------------------------

Check = Callable[[str], None]  # raises Refused for an address that may not be connected to
Dial = Callable[[str, int, "float | None"], socket.socket]  # (host, port, timeout) -> a connection


class OpenTcp(Protocol):
    """`Backend.open_tcp`: a connection made from the backend, each resolved address checked."""

    def __call__(self, host: str, port: int, *, timeout: float | None, check: Check | None = None) -> socket.socket: ...


def address_check(host: str, policy: WebPolicy | None) -> Check | None:
    """The policy's address rule for the addresses `host` resolves to, wherever it is resolved
    (here, or on a backend): raises Refused naming the host, the address and the rule."""
    if policy is None:
        return None
    literal = _literal(host) is not None

    def check(address: str) -> None:
        reason = policy.address_refusal(address)
        if reason is not None:
            raise Refused(reason if literal else f"{host} resolves to {address}: {reason}")

    return check


def resolve_here(host: str, port: int, timeout: float | None) -> list[str]:
    """The addresses `host` has on this machine (resolve(), as strings)."""
    found: list[str] = []
    for _, sockaddr in resolve(host, port, timeout):
        if str(sockaddr[0]) not in found:
            found.append(str(sockaddr[0]))
    return found


def connect_here(address: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection from this machine to the literal `address`."""
    return socket.create_connection((address, port), timeout=timeout)


def open_checked(host: str, port: int, timeout: float | None, check: Check | None,
                 resolve_on: Callable[[str, int, float | None], list[str]],
                 connect_on: Callable[[str, int, float | None], socket.socket]) -> socket.socket:
    """A connection to `host`:`port` on some network: the name resolved there (`resolve_on`),
    every address it has passed to `check` before any is used (one refused address refuses the
    name: DNS rebinding), then connected to (`connect_on`) one of those checked addresses, so a
    second, different answer of that network's resolver cannot be what is reached. Without a
    check, the name goes to `connect_on` as it is (that network resolves it)."""
    if check is None:
        return _timed(connect_on, host, port, timeout)
    literal = _literal(host)
    addresses = [literal] if literal is not None else resolve_on(host, port, timeout)
    for address in addresses:
        check(address)
    end = None if timeout is None else time.monotonic() + timeout
    last: OSError | None = None
    for address in addresses:
        left = None if end is None else max(0.01, end - time.monotonic())
        try:
            return _timed(connect_on, address, port, left)
        except OSError as exc:
            last = exc
    raise last or OSError(f"{host} has no address to connect to")


def _timed(connect_on: Callable[[str, int, float | None], socket.socket], host: str, port: int,
           timeout: float | None) -> socket.socket:
    sock = connect_on(host, port, timeout)
    sock.settimeout(None)
    return sock


def checked_dial(policy: WebPolicy | None, open_tcp: OpenTcp | None = None) -> Dial:
    """How web and browser tools connect: here (open_tcp None), or from the backend through its
    `open_tcp`; either way each resolved address passes the policy."""
    if open_tcp is None:
        return lambda host, port, timeout: connect_checked(host, port, policy, timeout)
    through = open_tcp
    return lambda host, port, timeout: through(host, port, timeout=timeout, check=address_check(host, policy))
