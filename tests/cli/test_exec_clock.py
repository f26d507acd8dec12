"""`herald exec`'s result tells the real times: its duration is the time herald exec took, and a
run that ended well past its --timeout (its backend-mode supervisor stopped with SIGSTOP, so it
cannot answer the kill) says when it ended, not only the limit it had."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from . import _herald

T = 4
SUPERVISOR = b"from _hermes_runtime.supervisor.loop import main"


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, up in parents.items() if up == parent]
        found += children
        frontier += children
    return found


def _supervisors(root: int) -> list[int]:
    """The supervisor interpreters below `root` (not the shell guard that started them)."""
    found = []
    for pid in _descendants(root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if SUPERVISOR in cmdline and b".guard import" not in cmdline:
            found.append(pid)
    return found


def test_a_stopped_supervisor_the_note_says_when_the_run_really_ended(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = work / "s.py"
    script.write_text("import time\nopen('started', 'w').close()\ntime.sleep(300)\n")
    began = time.monotonic()
    proc = _herald.start(["exec", "--json", "--exec-mode", "backend", "--timeout", str(T), str(script)],
                         cwd=work, home=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stopped: list[int] = []
    try:
        limit = time.monotonic() + 120
        while not (work / "started").exists() and proc.poll() is None and time.monotonic() < limit:
            time.sleep(0.05)
        assert (work / "started").exists(), "the script never started"
        stopped = _supervisors(proc.pid)
        assert stopped, "no backend-mode supervisor found below herald exec"
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        out, err = proc.communicate(timeout=180)
    finally:
        for pid in stopped:  # whatever Herald left must not stay stopped for ever
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    elapsed = time.monotonic() - began
    assert proc.returncode == 124, (proc.returncode, out[-2000:], err[-2000:])
    result = json.loads(out)
    assert result["status"] == "timeout", result
    assert result["duration_seconds"] <= elapsed, (result["duration_seconds"], elapsed)
    ended = [m for n in result["notes"] if (m := re.search(r"The run ended ([\d.]+) s after it began", n))]
    if result["duration_seconds"] > T + 1:  # the kill went unanswered: the note names the real end
        assert ended, result["notes"]
        assert abs(float(ended[0].group(1)) - result["duration_seconds"]) < 0.2, result
        assert "did not answer the kill" in " ".join(result["notes"]), result["notes"]
