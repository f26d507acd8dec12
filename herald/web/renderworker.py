"""One extraction worker: a process of its own that turns fetched pages into text (render.py),
started by renderpool.py with an empty environment and nothing of Herald's open but its pipes.

Parsing and extracting a page is pure Python and C under the GIL: in Herald's process it would
stall every other thread (fetches, the RPC server, the run's timers). Here it runs beside them, a
page at a time, under an address-space limit (RLIMIT_AS), so a page that needs too much memory
fails alone; a worker whose resident size has grown past the recycle bound exits after its
reply, and the pool starts a fresh one. It dies with its parent: PR_SET_PDEATHSIG, and stdin's EOF.
Once its libraries are loaded it creates no socket of any kind (no_new_privs and a seccomp
filter, on x86_64 and aarch64): a page that took over the parser reaches neither the network
nor a local daemon's unix socket; its pipes to Herald are all it has.

Protocol (pipes; replies are JSON, never pickle: the worker parses untrusted pages):
    parent -> worker   a JSON line {"url", "content_type", "charset", "size"} + `size` body bytes
    worker -> parent   b"<n>\\n" + n bytes of JSON: {"url", "title", "text", "links"} or
                       {"error": message}; either with "recycle": true when the worker then exits
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import sys
from typing import IO, Any

from .._sandbox.confine import seccomp
from .._sandbox.procs.trees import die_with_parent
from .errors import PageError
from .page import Fetched

MIB = 1024 * 1024
PR_SET_NO_NEW_PRIVS = 38
# socket() and socketpair() of every family refused (and io_uring, which makes sockets without them).
NO_SOCKETS = seccomp.Rules(errno=errno.EPERM, foreign_errno=None, refused=("io_uring_setup",),
                           socket_calls=("socket", "socketpair"), families=(), other_families=False)
NEAR_LIMIT = 0.75  # a peak address space past this share of the limit: allocations were being refused


def _resident_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reply(out: IO[bytes], message: dict[str, Any]) -> None:
    data = json.dumps(message).encode("ascii")
    out.write(b"%d\n" % len(data) + data)
    out.flush()


def _peak_address_space() -> int:
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"VmPeak:"):
                return int(line.split()[1]) * 1024
    return 0


def _out_of_memory(memory_limit: int) -> dict[str, Any]:
    return {"error": f"extracting the page needed more than {memory_limit // MIB} MiB of memory "
                     "(web.extract_worker_memory_mb); fetch it with terminal('curl -o FILE URL') and read "
                     "parts of it instead", "recycle": True}


def _answer(page: Fetched, memory_limit: int) -> dict[str, Any]:
    from .render import render

    try:
        rendered = render(page)
    except MemoryError:
        return _out_of_memory(memory_limit)
    except Exception as exc:  # one page's surprise must not end the worker
        # lxml reports a refused allocation as a parse error ("unknown error"): a failure with the
        # address space near its limit is taken for what it most likely is.
        if memory_limit > 0 and _peak_address_space() > memory_limit * NEAR_LIMIT:
            return _out_of_memory(memory_limit)
        if isinstance(exc, PageError):
            return {"error": str(exc)}
        if isinstance(exc, RecursionError):
            return {"error": "the page's HTML is nested too deeply to extract; fetch it with terminal('curl ...')"}
        return {"error": f"extracting the page failed: {type(exc).__name__}: {exc}"}
    return {"url": rendered.url, "title": rendered.title, "text": rendered.text, "links": rendered.links}


def refuse_sockets() -> bool:
    """no_new_privs, then the NO_SOCKETS filter on this (single-threaded) process; False where
    the machine has no filter or the kernel refuses it (the worker then runs unfiltered)."""
    if not seccomp.supported():
        return False
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        seccomp.install(seccomp.program(os.uname().machine, NO_SOCKETS))
    except OSError:
        return False
    return True


def main() -> None:
    parent, memory_limit, recycle_at = (int(value) for value in sys.argv[-3:])
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Herald decides when its workers end
    # Replies go out on a private copy of stdout: a library that prints must not break the protocol.
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    stdin = sys.stdin.buffer
    from . import render

    render.warm()  # the libraries' lazy parts loaded now, not on the first page
    refuse_sockets()
    while True:
        header = stdin.readline()
        if not header:
            return  # Herald closed the pool, or died
        fields = json.loads(header)
        body = stdin.read(fields["size"])
        page = Fetched(fields["url"], fields["content_type"], fields["charset"], body)
        message = _answer(page, memory_limit)
        if recycle_at > 0 and _resident_bytes() > recycle_at:
            message["recycle"] = True
        _reply(out, message)
        if message.get("recycle"):
            return


if __name__ == "__main__":
    main()
