"""Where an SSH backend connects: `ssh://USER@HOST[:PORT][/DIRECTORY]`, parsed without paramiko."""

from __future__ import annotations

import getpass
import posixpath
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

DEFAULT_PORT = 22


@dataclass(frozen=True)
class SSHTarget:
    host: str
    user: str
    port: int = DEFAULT_PORT
    directory: str = ""  # where the session starts; empty: the user's home

    @property
    def known_hosts_name(self) -> str:
        """The host as known_hosts names it: `host` on port 22, else `[host]:port`."""
        return self.host if self.port == DEFAULT_PORT else f"[{self.host}]:{self.port}"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}" + (f":{self.port}" if self.port != DEFAULT_PORT else "")


def parse_ssh_spec(spec: str) -> SSHTarget:
    """`ssh://USER@HOST[:PORT][/DIRECTORY]` -> SSHTarget; ValueError saying what is wrong.

    The user defaults to the local user name, as with `ssh`; a directory, when given, is an
    absolute path on the host (`ssh://me@box/srv/app`), else the session starts in the home.
    """
    if not spec.startswith("ssh://"):
        raise ValueError(f"{spec!r} is not an SSH backend; write ssh://USER@HOST[:PORT]")
    parts = urlsplit(spec)
    if parts.query or parts.fragment:
        raise ValueError(f"{spec!r}: an SSH backend takes no '?' or '#' part; write ssh://USER@HOST[:PORT]")
    if not parts.hostname:
        raise ValueError(f"{spec!r} names no host; write ssh://USER@HOST[:PORT]")
    if parts.password is not None:
        raise ValueError(
            f"{spec!r}: passwords are not accepted in the spec; use a key (setting ssh.key_file) or an ssh-agent"
        )
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(f"{spec!r}: the port must be a number from 1 to 65535") from None
    directory = unquote(parts.path) if parts.path not in ("", "/") else ""
    return SSHTarget(
        host=parts.hostname,
        user=unquote(parts.username) if parts.username else getpass.getuser(),
        port=port,
        directory=posixpath.normpath(directory) if directory else "",
    )
