"""Running `herald` as a person does: a real subprocess with its own data dir and no config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERALD = [sys.executable, "-m", "herald"]


def herald_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, HERALD_DATA_DIR=str(home / "data"), HERALD_CONFIG=str(home / "none.toml"))
    for key in ("HERALD_TOOLS", "FIRECRAWL_API_KEY", "FIRECRAWL_API_URL", "BRAVE_API_KEY", "BRAVE_SEARCH_API_KEY",
                "TAVILY_API_KEY", "EXA_API_KEY"):  # what the tester has set
        env.pop(key, None)
    env.update(extra)
    return env


def run(args: list[str], cwd: Path, home: Path, stdin: str | None = None, timeout: float = 120,
        **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(HERALD + args, cwd=cwd, env=herald_env(home, **env), input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def start(args: list[str], cwd: Path, home: Path, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(HERALD + args, cwd=cwd, env=herald_env(home), text=True, **kwargs)
