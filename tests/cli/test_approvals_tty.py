"""Approvals on a terminal: the real `herald exec` / `herald run` on a pty (os.openpty) ask about
calls an `ask` rule stops — allow once, always for the session, deny — one question at a time,
with the answer read from the terminal; a slow answer does not burn the script's timeout; with
CI set nothing is asked and the call is refused with a message naming the rule."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import subprocess
import termios
import time
from pathlib import Path
from typing import IO

from tests.cli._herald import HERALD, herald_env
from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

DEADLINE = 90.0
QUESTION = b"[N] deny: "
ASK_ECHO = ["-c", 'policy.rules=["ask terminal command=echo"]']

WORDS = """
from hermes_tools import terminal, ToolError
for word in ["one", "two", "three", "four"]:
    try:
        print("ran", terminal("echo " + word)["output"].strip(), flush=True)
    except ToolError as exc:
        print("refused", word, exc.error_type, flush=True)
"""


class Terminal:
    """A herald process whose stdin, stdout and stderr are one pty; what it wrote so far in `seen`."""

    def __init__(self, args: list[str], cwd: Path, home: Path, stderr: IO[bytes] | None = None, **env: str) -> None:
        self.master, slave = pty.openpty()
        environ = herald_env(home, **env)
        if "CI" not in env:
            environ.pop("CI", None)
        # Its own session with the pty as controlling terminal (/dev/tty), as in a login shell.
        self.proc = subprocess.Popen([*HERALD, *args], cwd=cwd, env=environ, stdin=slave, stdout=slave,
                                     stderr=stderr if stderr is not None else slave, start_new_session=True,
                                     preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.seen = bytearray()

    def read_until(self, wanted: bytes, count: int = 1) -> None:
        deadline = time.monotonic() + DEADLINE
        while self.seen.count(wanted) < count:
            assert time.monotonic() < deadline, f"never saw {wanted!r} x{count} on the terminal: {bytes(self.seen)!r}"
            self._read(0.5)

    def _read(self, timeout: float) -> bool:
        import select

        if select.select([self.master], [], [], timeout)[0]:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # the process is gone and its side of the pty with it
                return False
            self.seen += data
            return bool(data)
        return True

    def answer(self, text: str) -> None:
        os.write(self.master, text.encode() + b"\n")

    def wait(self) -> int:
        deadline = time.monotonic() + DEADLINE
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        while self._read(0.05):  # what is left on the pty
            pass
        return self.proc.wait(timeout=5)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)

    @property
    def text(self) -> str:
        return self.seen.decode("utf-8", "replace")


def _policy_records(home: Path) -> list[dict[str, object]]:
    records = []
    for path in (home / "data").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("type") == "policy":
                records.append(record)
    return records


def test_exec_asks_once_always_deny_on_the_terminal(workspace: Path, home: Path) -> None:
    (workspace / "s.py").write_text(WORDS)
    term = Terminal(["exec", "s.py", *ASK_ECHO], workspace, home)
    try:
        term.read_until(QUESTION)
        assert "terminal (from a script) needs approval: rule 'ask terminal command=echo'" in term.text
        assert "command: echo one" in term.text
        # The script's output may be held back while the next question is on screen: answers
        # go by the questions only, the output is checked at the end.
        term.answer("y")
        term.read_until(QUESTION, 2)
        assert "command: echo two" in term.text
        term.answer("n")
        term.read_until(QUESTION, 3)
        term.answer("maybe")  # not an answer: asked again
        term.read_until(b"please answer y, a or n")
        term.answer("a")
        assert term.wait() == 0, term.text
        for line in ("ran one", "refused two PolicyRefused", "ran three", "ran four"):
            assert line in term.text
        assert term.seen.count(QUESTION) == 3  # "always": the fourth call was not asked about
    finally:
        term.close()
    decisions = [(r["decision"], r["rule"]) for r in _policy_records(home)]
    rule = "policy.rules: ask terminal command=echo"
    assert decisions == [("approved", rule), ("denied", rule), ("approved", rule), ("approved", rule)]


def test_the_question_goes_to_the_terminal_when_stderr_is_a_file(workspace: Path, home: Path, tmp_path: Path) -> None:
    (workspace / "s.py").write_text(WORDS)
    with open(tmp_path / "stderr.log", "wb") as log:
        term = Terminal(["exec", "s.py", *ASK_ECHO], workspace, home, stderr=log)
        try:
            term.read_until(QUESTION)
            term.answer("a")
            assert term.wait() == 0
        finally:
            term.close()
    assert "ran four" in term.text
    assert b"deny" not in (tmp_path / "stderr.log").read_bytes()


def test_parallel_asks_come_one_at_a_time(workspace: Path, home: Path) -> None:
    (workspace / "s.py").write_text(
        "from hermes_tools import parallel, terminal\n"
        "out = parallel([lambda w=w: terminal('echo ' + w) for w in ('a1', 'b2', 'c3')])\n"
        "print('outputs', sorted(r['output'].strip() for r in out))\n"
    )
    term = Terminal(["exec", "s.py", *ASK_ECHO], workspace, home)
    try:
        for n in (1, 2, 3):
            term.read_until(QUESTION, n)
            time.sleep(0.3)  # a second question would show up here if asks were not serialised
            assert term.seen.count(QUESTION) == n
            term.answer("y")
        assert term.wait() == 0, term.text
        assert "outputs ['a1', 'b2', 'c3']" in term.text
    finally:
        term.close()


def test_waiting_on_an_answer_does_not_burn_the_timeout(workspace: Path, home: Path) -> None:
    (workspace / "s.py").write_text(
        "import time\nfrom hermes_tools import terminal\n"
        "print('ran', terminal('echo slow')['output'].strip(), flush=True)\n"
        "time.sleep(600)\n"
    )
    term = Terminal(["exec", "s.py", "--timeout", "3", *ASK_ECHO], workspace, home)
    try:
        term.read_until(QUESTION)
        time.sleep(5)  # longer than the whole timeout: the run must still be waiting
        assert term.proc.poll() is None
        term.answer("y")
        term.read_until(b"ran slow")
        assert term.wait() == 124, term.text  # and the timeout still applies after the answer
        assert "timeout" in term.text
    finally:
        term.close()


def test_ci_means_no_question_and_a_refusal_naming_the_rule(workspace: Path, home: Path) -> None:
    (workspace / "s.py").write_text(WORDS)
    term = Terminal(["exec", "s.py", *ASK_ECHO], workspace, home, CI="true")
    try:
        assert term.wait() == 0, term.text
    finally:
        term.close()
    assert QUESTION not in term.seen
    # The four refusals the script printed, Herald's note on them, and the summary's count.
    assert all(f"refused {word} PolicyRefused" in term.text for word in ("one", "two", "three", "four"))
    assert "ran " not in term.text
    assert "4 tool call(s) were refused by the permission policy" in term.text
    assert "4 refused" in term.text


def test_run_asks_on_the_terminal_with_the_live_view(workspace: Path, home: Path) -> None:
    with FakeLLMServer() as llm:
        llm.script(calls(call("terminal", command="echo approved-direct")),
                   calls(call("terminal", command="echo denied-direct")), reply("all done"))
        term = Terminal(["run", "go", "--base-url", llm.openai_base_url, "--model", "m", *ASK_ECHO], workspace,
                        home, OPENAI_API_KEY="k")
        try:
            term.read_until(QUESTION)
            assert "terminal (called by the model) needs approval" in term.text
            term.answer("y")
            term.read_until(QUESTION, 2)
            term.answer("n")
            term.read_until(b"all done")
            assert term.wait() == 0, term.text
        finally:
            term.close()
        [(_, first)] = llm.requests[1].tool_results()
        assert "approved-direct" in first
        [(_, second)] = llm.requests[2].tool_results()
        assert "was not approved (rule 'ask terminal command=echo')" in second


def test_ctrl_c_at_the_question_stops_the_run(workspace: Path, home: Path) -> None:
    (workspace / "s.py").write_text(WORDS)
    term = Terminal(["exec", "s.py", *ASK_ECHO], workspace, home)
    try:
        term.read_until(QUESTION)
        os.write(term.master, b"\x03")  # Ctrl-C on the terminal: SIGINT to herald
        assert term.wait() == 130, term.text
    finally:
        term.close()
    assert "ran one" not in term.text and "interrupted" in term.text, term.text
