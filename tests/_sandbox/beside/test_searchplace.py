"""Where a backend-mode supervisor runs ripgrep for search_files (herald/_sandbox/beside/searchplace.py):
a bash of its own, whose output is captured up to the session shell's cap (past it the search
walks instead) and which is killed with everything it started when the call's time is up or the
run is over. The answers themselves are compared with Herald's in
tests/backends/conformance/test_conformance_search_in_backend.py."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import cast

from herald._sandbox.beside.searchplace import SupervisorPlace
from herald._sandbox.wire.grant import SearchGrant
from tests.runtime._helpers import pids_with_marker, wait_for

SPEC = {"python_only": False, "bin": "bash", "max_output_bytes": 1000, "timeout": 60}


def _place(cwd: Path, cancel: threading.Event | None = None) -> SupervisorPlace:
    return SupervisorPlace(
        cast(SearchGrant, SPEC), 1 << 20, str(cwd), {}, threading.Lock(), cancel or threading.Event()
    )


def test_output_and_status_as_the_session_shell_reports_them(tmp_path: Path) -> None:
    ran = _place(tmp_path).run("pwd; printf 'ünï\\n'; exit 3", 60, str(tmp_path))
    assert (ran.output, ran.exit_code, ran.timed_out, ran.truncated) == (f"{tmp_path}\nünï", 3, False, False)


def test_output_past_the_cap_is_reported_as_cut(tmp_path: Path) -> None:
    ran = _place(tmp_path).run("head -c 5000 /dev/zero | tr '\\0' x", 60)
    assert ran.truncated and not ran.timed_out


def test_out_of_time_or_cancelled_the_command_dies_with_what_it_started(tmp_path: Path) -> None:
    marker = f"1000.{uuid.uuid4().int % 10**9:09d}"
    ran = _place(tmp_path).run(f"echo started; sleep {marker} | cat", 0.5)
    assert ran.timed_out and ran.output == "started"
    assert wait_for(lambda: not pids_with_marker(marker), timeout=30), "the command outlived its time"

    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    ran = _place(tmp_path, cancel).run(f"sleep {marker}", 600)
    assert ran.timed_out
    assert wait_for(lambda: not pids_with_marker(marker), timeout=30), "the command outlived the run"
