"""Entry point of a sandbox child. Stdlib only, Python >= 3.8.

Started as `python -I -B -c <loader> SANDBOX_DIR CTL_READ_FD CTL_WRITE_FD [keep]`, or forked by
the fork server (child/zygote.py), which calls `serve` with the same fds. With `keep` (no PID namespace
holds the run) it first forks a keeper that outlives nothing of the run (procs/reaper.py). It blocks `herald`
imports, pre-imports `hermes_tools`, says "ready" on the control pipe and waits: a warm child
costs nothing until the parent hands it a script. Then:

- "oneshot": run the script once and exit with its status (the parent sees the exit).
- "kernel": run script after script in one globals dict; after each, write a sentinel on stdout
  and stderr (so the parent knows it has all the output) and report "done" on the control pipe.
"""

from __future__ import annotations

import builtins
import linecache
import os
import signal
import sys
import traceback
from typing import Any, Dict, Optional, Set, Union

from ..procs.trees import become_subreaper, descendants, die_with_parent, set_dumpable, signal_pids
from ..wire import frames
from ..wire import guards as wire
from ..wire.framing import FrameReader, ProtocolError, encode_frame

KEEP_ARG = "keep"
BLOCKED_MESSAGE = (
    "Herald's own package is not importable inside the sandbox; call tools through hermes_tools."
)


class _HeraldBlocker:
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "herald" or name.startswith("herald."):
            raise ModuleNotFoundError(BLOCKED_MESSAGE, name=name)
        return None


class _PipeReader:
    """Lets protocol.FrameReader read frames from a pipe fd. `recv`, not `recv_into`: the child
    reads a frame or a few, and a reader's 64 KB buffer, zeroed, would be 16 pages of its own
    in every waiting child (os.read's buffer holds only what came)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def recv(self, size: int) -> bytes:
        return os.read(self.fd, size)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _on_sigterm(signum: int, frame: Any) -> None:
    # Keep what the script printed before a timeout or interrupt: flush, then go.
    _flush()
    os._exit(128 + signum)


def _kill_descendants() -> None:
    # A process the script started outside our process group (start_new_session, a daemon)
    # would be re-parented to init the moment we exit, where the parent cannot find it: kill
    # everything below us first, so nothing outlives the run.
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return  # no children (live or unreaped), so no descendants: skip the /proc walk
    except (AttributeError, OSError):
        pass
    for _ in range(3):
        found = descendants(os.getpid())
        if not found:
            return
        signal_pids(found, signal.SIGKILL)


_INTERNAL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package


def _is_internal(filename: str) -> bool:
    """Frames of hermes_tools.py and the _hermes_runtime package: plumbing, not the script."""
    path = os.path.abspath(filename)
    if path.startswith(_INTERNAL_DIR + os.sep):
        return True
    stubs = getattr(sys.modules.get("hermes_tools"), "__file__", None)
    return stubs is not None and path == os.path.abspath(stubs)


def _strip_internal_frames(exc: "Optional[BaseException]", seen: "Optional[Set[int]]" = None) -> None:
    # A failing tool call should point at the script's line, not at the stub and the RPC
    # client below it: drop those frames from the exception and its chained causes.
    seen = set() if seen is None else seen
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        kept = []
        tb = exc.__traceback__
        while tb is not None:
            if not _is_internal(tb.tb_frame.f_code.co_filename):
                kept.append(tb)
            tb = tb.tb_next
        for index, current in enumerate(kept):
            current.tb_next = kept[index + 1] if index + 1 < len(kept) else None
        exc.__traceback__ = kept[0] if kept else None
        _strip_internal_frames(exc.__context__, seen)
        exc = exc.__cause__


def _report_exception(exc: BaseException) -> None:
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
    else:
        # Drop our own exec() frame so the traceback starts in the script.
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        exc.__traceback__ = tb
        _strip_internal_frames(exc)
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    sys.stderr.write("".join(lines))


def _set_line_buffering(enabled: bool) -> None:
    """Line-buffer stdout and stderr while someone watches the run live (herald exec)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            getattr(stream, "reconfigure")(line_buffering=enabled)  # noqa: B009
        except Exception:
            pass


def run_code(code: str, filename: str, namespace: Dict[str, Any]) -> int:
    """Run one script; return its exit status (0 ok, 1 uncaught exception, n for sys.exit(n))."""
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        compiled = compile(code, filename, "exec")
        exec(compiled, namespace)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        sys.stderr.write("%s\n" % (exc.code,))
        return 1
    except BaseException as exc:
        _report_exception(exc)
        return 1
    return 0


def ready_for_scripts() -> None:
    """What any script's interpreter needs: Herald's package blocked, output that never fails to
    encode. A zygote does it once for all its forks (shared pages, nothing to do per run)."""
    sys.meta_path.insert(0, _HeraldBlocker())
    for stream in (sys.stdout, sys.stderr):
        try:
            getattr(stream, "reconfigure")(encoding="utf-8", errors="backslashreplace")  # noqa: B009
        except Exception:
            pass


def _configure(message: frames.StartFrame, ctl_write: int) -> None:
    from . import client

    _set_line_buffering(bool(message.get("line_buffered")))
    client.configure(
        client.unix_connector(str(message.get("socket"))),
        str(message.get("token")),
        int(message.get("max_parallel") or client.DEFAULT_MAX_CONNECTIONS),
        _self_serve(message, message, ctl_write),
    )
    cwd = message.get("cwd")
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as exc:
            sys.stderr.write("warning: could not enter %s: %s\n" % (cwd, exc))


def _self_serve(
    start: frames.StartFrame, grant_from: Union[frames.StartFrame, frames.CodeFrame], ctl_write: int
) -> Any:
    """What this process may answer itself (child/selfserve.py, taken up at the first call): host
    mode's grant in the start frame or kernel cell `grant_from`, the schemas in `start`."""
    if "tools" not in grant_from:
        return None
    return (grant_from.get("tools"), start.get("tool_specs"), ctl_write)


def _oneshot(message: frames.StartFrame, ctl_write: int) -> None:
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__file__": "<script>"}
    status = run_code(message.get("code") or "", "<script>", namespace)
    try:
        import threading

        getattr(threading, "_shutdown", lambda: None)()  # wait for non-daemon threads, as python does
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:  # its last output and exit status can then travel to Herald together (supervisor/loop.py)
        leaving: frames.LeavingFrame = {"type": frames.LEAVING}
        os.write(ctl_write, encode_frame(leaving))
    except OSError:
        pass
    _flush()
    _kill_descendants()
    code = status & 0xFF if status >= 0 else 1
    try:  # the parent learns the status now, without waiting to reap us
        exited: frames.ExitFrame = {"type": frames.EXIT, "exit_code": code}
        os.write(ctl_write, encode_frame(exited))
    except OSError:
        pass
    os._exit(code)


def _kernel(message: frames.StartFrame, reader: FrameReader, ctl_write: int) -> None:
    from . import client

    sentinel = str(message.get("sentinel")).encode("ascii")
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    counter = 0
    while True:
        try:
            request = _read_frame(reader)
        except (OSError, ProtocolError):
            request = None
        if request is None or request["type"] != frames.CODE:
            _flush()
            os._exit(0)
        counter += 1
        _set_line_buffering(bool(request.get("line_buffered")))
        client.answer_here(_self_serve(message, request, ctl_write))
        status = run_code(request["code"], "<cell %d>" % counter, namespace)
        client.answer_here(None)  # the cell's grant ends with it: a thread it left asks Herald
        _flush()
        os.write(1, sentinel)
        os.write(2, sentinel)
        done: frames.DoneFrame = {"type": frames.DONE, "exit_code": status}
        os.write(ctl_write, encode_frame(done))


def main() -> None:
    from ..confine.inprocess import confine_from_environ

    confine_from_environ()
    ctl_read, ctl_write = int(sys.argv[2]), int(sys.argv[3])
    if sys.argv[4:5] == [KEEP_ARG]:
        from ..procs.reaper import fork_keeper

        fork_keeper((ctl_read, ctl_write))
    ready_for_scripts()
    serve(ctl_read, ctl_write)


def _read_frame(reader: FrameReader) -> Optional[frames.ToChild]:
    """The parent's next frame (None: it closed the pipe); a malformed one raises ProtocolError."""
    message = reader.read()
    return None if message is None else wire.to_child(message)


def serve(ctl_read: int, ctl_write: int) -> None:
    """Be a sandbox child on these control fds: say ready, take one run, never return.
    Started fresh (`main`), or forked from the fork server (child/zygote.py), whose interpreter is
    ready for scripts already: a forked child does as little as it can (every page it writes
    to becomes its own copy of its zygote's, and each of many Runtimes holds a waiting child)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    import hermes_tools  # noqa: F401  (pre-import: the script's own import is then free)

    become_subreaper()  # what the script starts stays below this process, daemons included
    die_with_parent()  # a killed Herald (or zygote) takes this process, and so its tree, along
    set_dumpable(False)  # other runs of this user cannot trace it or read its memory
    ready: frames.ReadyFrame = {"type": frames.READY, "pid": os.getpid()}
    os.write(ctl_write, encode_frame(ready))
    reader = FrameReader(_PipeReader(ctl_read))
    try:
        message = _read_frame(reader)
    except (OSError, ProtocolError):
        message = None
    if message is None or message["type"] != frames.START:  # the parent went away before using this warm child
        os._exit(0)
    sys.argv = ["<script>"]
    _configure(message, ctl_write)
    if message.get("mode") == "kernel":
        _kernel(message, reader, ctl_write)
    else:
        _oneshot(message, ctl_write)
