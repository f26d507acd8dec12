"""Install the third-party MCP servers the MCP tests drive, into a cache shared by every checkout.

    python3 -m tests.mcp.servers        # what `make mcp-servers` runs; tests call `ensure()` too

PyPI servers (mcp-server-time, mcp-server-git) go into a venv of their own, so their `mcp` pin
never touches Herald's environment; npm servers (server-memory, server-everything) into an npm
prefix, with Debian's node. The cache is keyed on the pinned versions: a rerun costs nothing.
A server that cannot be installed is reported with the reason; its tests skip with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PYPI = {"mcp-server-time": "2026.10.19", "mcp-server-git": "2026.10.19"}
NPM = {"@modelcontextprotocol/server-memory": "2026.8.31", "@modelcontextprotocol/server-everything": "2026.8.31"}
CACHE = Path(os.environ.get("HERALD_TEST_CACHE", Path.home() / ".cache" / "herald-tests"))


@dataclass(frozen=True)
class Installed:
    """Each server's command line (a list), or the reason it is missing."""

    commands: dict[str, list[str]]
    missing: dict[str, str]

    def command(self, name: str) -> list[str]:
        import pytest

        if name not in self.commands:
            pytest.skip(f"MCP server {name} is not installed: {self.missing.get(name, 'unknown server')}")
        return self.commands[name]


def _root() -> Path:
    key = hashlib.sha256(repr((sorted(PYPI.items()), sorted(NPM.items()), sys.version_info[:2])).encode()).hexdigest()[
        :12
    ]
    return CACHE / f"mcp-servers-{key}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(cmd: list[str], timeout: float = 600) -> str | None:
    """None on success, else the reason (the command's last lines)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(cmd[:3])}: {exc}"
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        return f"{' '.join(cmd[:3])} exited {done.returncode}: {tail}"
    return None


def ensure() -> Installed:
    root = _root()
    commands: dict[str, list[str]] = {}
    missing: dict[str, str] = {}
    with _locked(CACHE / "mcp-servers.lock"):
        venv = root / "venv"
        done = root / "venv.ok"
        if not done.exists():
            shutil.rmtree(venv, ignore_errors=True)
            problem = _run([sys.executable, "-m", "venv", str(venv)]) or _run(
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 *(f"{n}=={v}" for n, v in PYPI.items())]
            )
            if problem is None:
                done.touch()
            else:
                for name in PYPI:
                    missing[name] = problem
        if done.exists():
            for name in PYPI:
                commands[name] = [str(venv / "bin" / name)]
        prefix = root / "npm"
        npm_done = root / "npm.ok"
        if not npm_done.exists():
            if shutil.which("npm") is None or shutil.which("node") is None:
                problem = "node and npm are not installed (apt-get install nodejs npm)"
            else:
                prefix.mkdir(parents=True, exist_ok=True)
                problem = _run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix),
                                *(f"{n}@{v}" for n, v in NPM.items())])
            if problem is None:
                npm_done.touch()
            else:
                for name in NPM:
                    missing[name.split("/")[-1]] = problem
        if npm_done.exists():
            for name in NPM:
                short = name.split("/")[-1]
                commands[short] = ["node", str(prefix / "node_modules" / name / "dist" / "index.js")]
    return Installed(commands, missing)


if __name__ == "__main__":
    installed = ensure()
    for server, command in installed.commands.items():
        print(f"{server}: {' '.join(command)}")
    for server, reason in installed.missing.items():
        print(f"{server}: NOT INSTALLED: {reason}", file=sys.stderr)
    sys.exit(1 if installed.missing else 0)
