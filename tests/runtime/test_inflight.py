"""A run's cap on the bytes Herald holds for its calls in flight (sandbox.max_inflight_bytes).

An attacker's script sends many large frames at once, or has many large files patched at once:
the parent's memory must stay within the cap (plus a margin for Herald itself), and the calls
past it fail with a message that says what to do.
"""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from herald._sandbox.wire.framing import HEADER, FrameBuffer, RefusedFrame, encode_frame

MIB = 1024 * 1024
CAP = 256 * MIB  # the default
# Herald's own growth beside what the cap counts: buffers, threads, allocator slack.
MARGIN = 160 * MIB


def _reset_peak() -> int:
    """Reset this process's peak RSS (VmHWM) to its RSS now; the RSS in bytes."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status("VmRSS")


def _status(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} not in /proc/self/status")


# What a fresh Herald process measures: a pytest worker carries other tests' threads and
# allocator state, which would count against the cap too.
_MEASURE = """
import json, sys
from pathlib import Path
from herald import Runtime, Settings
from herald.backends.local import LocalBackend

def status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

workspace, data, code, overrides, exec_mode = sys.argv[1:6]
settings = Settings(data_dir=Path(data)).with_overrides(json.loads(overrides))
with LocalBackend(workspace, settings=settings) as backend, Runtime(
    backend, settings=settings, exec_mode=exec_mode
) as runtime:
    runtime.wait_warm()
    runtime.execute("print(1)")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = status("VmRSS")
    result = runtime.execute(code, timeout=600)
    growth = status("VmHWM") - before
print(json.dumps({"growth": growth, "status": result.status, "output": result.output, "error": result.error}))
"""


def _growth_in_a_fresh_herald(workspace: Path, data: Path, code: str, overrides: dict[str, Any] | None = None,
                              exec_mode: str = "host") -> tuple[int, dict[str, Any]]:
    """Run `code` in a Runtime of a new Herald process: (its peak RSS growth over the run, the result)."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(workspace), str(data), code,
                           json.dumps(overrides or {}), exec_mode],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    return int(found.pop("growth")), found


# -- the frame decoder's admission ------------------------------------------------------------

def test_refused_frames_are_dropped_unread_and_answered_in_order() -> None:
    """Frames over `admit_over` are asked about by length; refused ones come out as RefusedFrame
    with their call id, in their place, whatever pieces the stream arrives in, and the buffer
    never holds a refused body."""
    rng = random.Random(7)
    for _ in range(40):
        sizes = [rng.choice([10, 100, 5_000, 40_000, 90_000]) for _ in range(12)]
        frames = [encode_frame({"id": i, "tool": "t", "args": {"x": "a" * size}}) for i, size in enumerate(sizes)]
        stream = b"".join(frames)
        asked: list[int] = []

        def admit(size: int, asked: list[int] = asked) -> bool:
            asked.append(size)
            return size < 60_000

        buffer = FrameBuffer(admit=admit, admit_over=1_000, track_sizes=True)
        out: list[dict[str, Any]] = []
        at = 0
        most_held = 0
        while at < len(stream):
            step = rng.choice([1, 7, 4096, 65536, 200_000])
            out.extend(buffer.feed(memoryview(stream)[at : at + step]))
            most_held = max(most_held, len(buffer._data))
            at += step
        assert [m["id"] for m in out] == list(range(len(frames)))
        for message, frame in zip(out, frames, strict=True):
            body = len(frame) - HEADER.size
            if body > 60_000:
                assert isinstance(message, RefusedFrame) and message["size"] == body
            else:
                assert not isinstance(message, RefusedFrame) and message["tool"] == "t"
        assert buffer.sizes == [len(f) - HEADER.size if 1_000 < len(f) - HEADER.size < 60_000 else 0 for f in frames]
        assert len(asked) == sum(1 for f in frames if len(f) - HEADER.size > 1_000), "a frame was asked about twice"
        assert most_held < 60_000 + 200_000, "a refused body was buffered"


def test_a_refused_frame_without_a_leading_id_says_so() -> None:
    buffer = FrameBuffer(admit=lambda size: False, admit_over=10)
    (refused,) = buffer.feed(encode_frame({"tool": "t", "id": 3, "args": "x" * 100}))
    assert isinstance(refused, RefusedFrame) and refused["id"] is None


# -- end to end -------------------------------------------------------------------------------

def test_sixty_large_frames_keep_the_parent_within_the_cap(workspace: Path, tmp_path: Path) -> None:
    """60 frames of ~63 MB from 16 threads: the parent's peak RSS grows by less than the cap and
    a margin, and the calls that did not fit were told why and what to do."""
    growth, result = _growth_in_a_fresh_herald(workspace, tmp_path / "data", textwrap.dedent("""
        import threading
        from collections import Counter
        from _hermes_runtime.child.client import call, ToolError
        big = "x" * (63 * 1000 * 1000)
        seen = Counter()
        messages = {}
        def send(n):
            for _ in range(n):
                try:
                    call("write_file", {"path": "never.txt", "content": big, "unknown_argument": 1})
                    seen["ran"] += 1
                except ToolError as exc:
                    seen[exc.error_type] += 1
                    messages[exc.error_type] = str(exc)
        threads = [threading.Thread(target=send, args=(4 if i < 12 else 3,)) for i in range(16)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(dict(seen))
        print(messages.get("InflightLimit", ""))
        """))
    assert result["status"] == "success", result
    assert "'ran'" not in result["output"], result["output"]
    counts = ast.literal_eval(result["output"].splitlines()[0])
    assert sum(counts.values()) == 60, counts
    assert counts.get("InflightLimit", 0) > 0, counts
    message = result["output"].splitlines()[1]
    assert "sandbox.max_inflight_bytes" in message and "fewer calls" in message, message
    assert growth < CAP + MARGIN, f"the parent grew by {growth / MIB:.0f} MiB"
    assert not (workspace / "never.txt").exists()


def test_parallel_patches_of_large_files_fail_clearly_past_the_cap(workspace: Path, tmp_path: Path) -> None:
    """16 patches of 16 files of ~19 MB at once: those that fit run, the rest fail with
    InflightLimit (their files unchanged), and the parent stays within the cap and a margin."""
    line = "a line of a large file, with some words on it\n"
    for k in range(16):
        (workspace / f"large{k}.txt").write_text(f"marker{k}\n" + line * (19_000_000 // len(line)))
    growth, result = _growth_in_a_fresh_herald(
        workspace,
        tmp_path / "data",
        textwrap.dedent("""
        from hermes_tools import parallel, patch, ToolError
        outcomes = parallel([(patch, "large%d.txt" % k, "marker%d" % k, "done%d" % k) for k in range(16)],
                            return_exceptions=True)
        for k, outcome in enumerate(outcomes):
            kind = outcome.error_type if isinstance(outcome, ToolError) else "patched"
            print(k, kind, str(outcome)[:400].replace("\\n", " "))
        """),
    )
    assert result["status"] == "success", result
    lines = result["output"].splitlines()
    assert len(lines) == 16, result["output"]
    patched = {int(line.split()[0]) for line in lines if line.split()[1] == "patched"}
    refused = [line for line in lines if line.split()[1] == "InflightLimit"]
    assert patched and refused, result["output"]
    assert len(patched) + len(refused) == 16, result["output"]
    assert all("sandbox.max_inflight_bytes" in line for line in refused), refused
    for k in range(16):
        head = (workspace / f"large{k}.txt").read_text()[:10]
        assert head.startswith(f"done{k}\n" if k in patched else f"marker{k}\n")
    # Before a patch is refused it has read its file: up to 16 of them at once, beside the cap.
    assert growth < CAP + 16 * 19 * MIB + MARGIN, f"the parent grew by {growth / MIB:.0f} MiB"


# A tool Herald answers (the supervisor answers the file tools itself in backend mode).
SIXTEEN_LARGE_CALLS = """
import threading
from collections import Counter
from _hermes_runtime.child.client import call, ToolError
big = "x" * (63 * 1000 * 1000)
seen = Counter()
messages = {}
def send():
    try:
        call("no_such_tool", {"path": "never.txt", "content": big})
        seen["ran"] += 1
    except ToolError as exc:
        seen[exc.error_type] += 1
        messages[exc.error_type] = str(exc)
threads = [threading.Thread(target=send) for i in range(16)]
for t in threads: t.start()
for t in threads: t.join()
print(dict(seen))
print(messages.get("InflightLimit", ""))
"""


@pytest.mark.parametrize("cap", [CAP, 100 * MIB], ids=["default", "below-one-call"])
def test_backend_mode_large_calls_are_capped_too(workspace: Path, tmp_path: Path, cap: int) -> None:
    """In backend mode the calls come over the exec channel one after another: a large one is
    counted once read, and one past the cap is refused before it is queued. With a cap below
    what one call holds, every one is refused with a message that says to send smaller pieces."""
    growth, result = _growth_in_a_fresh_herald(workspace, tmp_path / "data", SIXTEEN_LARGE_CALLS,
                                               {"sandbox.max_inflight_bytes": cap}, exec_mode="backend")
    assert result["status"] == "success", result
    counts = ast.literal_eval(result["output"].splitlines()[0])
    assert sum(counts.values()) == 16 and set(counts) <= {"UnknownTool", "InflightLimit"}, counts
    if cap < 3 * 63 * MIB:
        assert counts == {"InflightLimit": 16}, counts
        assert "smaller pieces" in result["output"].splitlines()[1]
    # One frame read beyond the cap, at most: 3 x 63 MB.
    assert growth < cap + 3 * 63 * MIB + MARGIN, f"the parent grew by {growth / MIB:.0f} MiB"


def test_a_frame_past_the_cap_is_answered_unread_and_the_connection_goes_on() -> None:
    """A caller announces a 50 MB call where the run may hold 100 MiB (a call holds 3x its
    frame): its body is dropped as it comes, its call (by the id its body starts with) gets
    InflightLimit, and the same connection's next call is served. Nothing stays counted."""
    import socket

    from herald._sandbox.wire.framing import FrameReader, reply_frame
    from herald.inflight import InflightBytes
    from herald.runtime.rpc.server import RpcServer

    budget = InflightBytes(100 * MIB)
    server: RpcServer[str] = RpcServer(lambda t: t if t == "good" else None,
                                       lambda s, m, e: reply_frame(m, {"result": "ok"}, e),
                                       inflight=lambda session: budget)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(60)
        sock.connect(server.path)
        body = b'{"id":5,"tool":"t","args":"' + b"x" * (50 * 1000 * 1000) + b'"}'
        before = _reset_peak()
        sock.sendall(encode_frame({"type": "auth", "token": "good"}) + HEADER.pack(len(body)))
        for at in range(0, len(body), 1 << 20):
            sock.sendall(body[at : at + (1 << 20)])
        sock.sendall(encode_frame({"id": 6, "tool": "t", "args": {}}))
        reader = FrameReader(sock)
        refused, served = reader.read(), reader.read()
        growth = _status("VmHWM") - before
        sock.close()
    finally:
        server.close()
    assert refused is not None and refused["id"] == 5 and refused["error"]["type"] == "InflightLimit", refused
    assert "smaller pieces" in refused["error"]["message"]
    assert served == {"id": 6, "result": "ok"}
    assert budget.held == 0 and budget.peak == 0
    assert growth < 40 * MIB, f"the server grew by {growth / MIB:.0f} MiB for a frame it refused"
