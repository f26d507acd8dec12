"""Text from models, tools, errors and sessions prints as written: square brackets such as
`pip install 'herald[ssh]'` or `Optional[str]` are never taken for rich markup. Run on a real
terminal (a pty), where the live view, the answer panel and the sessions table are drawn."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLMServer, call, calls, error, reply

from .test_cli_run import HERALD, _env

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-B]|\r")
INSTALL = "pip install 'herald[ssh]'"


def on_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run herald with stdout and stderr on a 220-column pty; (exit code, the text it showed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 220, 0, 0))
    # COLUMNS and LINES would override the pty's size (pytest-xdist's workers set them to 80x24).
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(HERALD + args, cwd=cwd, env={**env, "TERM": "xterm-256color"}, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer has closed the pty
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=60)
    return code, ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


@pytest.mark.timeout(180)
def test_brackets_print_intact(workspace: Path, tmp_path: Path, llm: FakeLLMServer) -> None:
    home = tmp_path / "home"
    home.mkdir()
    llm.script(
        error(429, "quota for model[large] reached, try again"),
        calls(
            call("terminal", command=f'echo "{INSTALL} gives Optional[str]"'),
            text="Checking Optional[str] [bold]first[/bold].",
        ),
        reply(f"Run {INSTALL} to get Optional[str] [red]support[/red]."),
    )
    task = "why does Optional[str] [red]fail"
    code, shown = on_terminal(["run", task, "--base-url", llm.openai_base_url, "--model", "m"], workspace,
                              _env(home, OPENAI_API_KEY="k"))
    assert code == 0, shown
    assert "model[large] reached" in shown  # the retry notice
    assert "custom:m: rate_limit" in shown  # its provider:model label, not taken for an emoji code (":m:")
    assert "Checking Optional[str] [bold]first[/bold]." in shown  # the model's text between tools
    assert f'→ terminal(command="echo \\"{INSTALL} gives Optional[str]\\"")' in shown  # the call
    assert f"{INSTALL} gives Optional[str]" in shown.split("✓ terminal", 1)[1]  # its result's summary
    assert f"Run {INSTALL} to get Optional[str] [red]support[/red]." in shown  # the answer panel

    code, listing = on_terminal(["sessions"], workspace, _env(home))
    assert code == 0 and task in listing and "custom:m" in listing
