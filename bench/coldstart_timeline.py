"""Where a cold `herald exec --exec-mode backend` print(1) spends its time: one timeline per run.

    python -m bench.coldstart_timeline [--rtt 0.010] [--runs 1] [--tree /path/to/another/checkout]

Starts the test sshd (tests/fixtures/sshd.py) behind the latency proxy, then runs the CLI as
bench/exec_mode_bench.py's `_cli` does, but in a traced interpreter: each line is a moment
after the process was started (ms), the thread it happened on, and what happened:
- `import X` / `imported X`: a watched module's import (its own nested imports included);
- `>` / `<`: an SSH message sent / received (paramiko's packetizer; channel messages name their
  channel and request type);
- `call` / `done`: Herald's own steps (connect, the setup, channels, the run, the close).
A received message that comes after at least 0.7 RTT of silence on the wire is marked `WAIT`:
the process sat waiting for the peer, a round trip on the critical path. Their count is printed.

The tracing wraps functions from outside (this is a measuring tool, nothing here is a test).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from typing import Any

OUT_ENV = "HERALD_TIMELINE_OUT"
T0_ENV = "HERALD_TIMELINE_T0"
WATCHED_IMPORTS = ("herald.cli", "herald.runtime", "herald.backends.ssh", "paramiko", "cryptography", "rich",
                   "herald.policy", "herald.tools")
# Herald's steps, as (module, class or "", function): logged when called and when they return.
STEPS = (
    ("herald.cli.common", "", "load"),
    ("herald.cli.common", "", "open_backend"),
    ("herald.backends.ssh.connection", "", "connect"),
    ("herald.backends.ssh.connection", "SSHConnection", "exec"),
    ("herald.backends.ssh.channel", "SSHChannel", "__init__"),
    ("herald.backends.ssh.channel", "SSHChannel", "close"),
    ("herald.backends.ssh.backend", "SSHBackend", "run"),
    ("herald.backends.ssh.backend", "SSHBackend", "close"),
    ("herald.runtime.runtime", "Runtime", "__init__"),
    ("herald.runtime.runtime", "Runtime", "execute"),
    ("herald.runtime.runtime", "Runtime", "close"),
    ("herald.runtime.sandbox.backend.sandbox", "BackendSandbox", "prepare"),
    ("herald.runtime.sandbox.backend.sandbox", "BackendSandbox", "close"),
    ("herald.runtime.sandbox.backend.child", "BackendChild", "wait_ready"),
    ("herald.runtime.sandbox.backend.child", "BackendChild", "send"),
    ("herald.runtime.sandbox.backend.child", "BackendChild", "collect"),
    ("herald.runtime.sandbox.backend.closer", "", "close_channel"),
    ("herald.runtime.sandbox.backend.closer", "ChannelCloser", "close"),
)
SSH_NAMES = {1: "DISCONNECT", 2: "IGNORE", 5: "SERVICE_REQUEST", 6: "SERVICE_ACCEPT", 7: "EXT_INFO", 20: "KEXINIT",
             21: "NEWKEYS", 30: "KEX_ECDH_INIT", 31: "KEX_ECDH_REPLY", 50: "USERAUTH_REQUEST", 51: "USERAUTH_FAILURE",
             52: "USERAUTH_SUCCESS", 60: "USERAUTH_PK_OK", 80: "GLOBAL_REQUEST", 81: "REQUEST_SUCCESS",
             82: "REQUEST_FAILURE", 90: "CHANNEL_OPEN", 91: "CHANNEL_OPEN_CONFIRMATION", 93: "WINDOW_ADJUST",
             94: "CHANNEL_DATA", 95: "EXTENDED_DATA", 96: "CHANNEL_EOF", 97: "CHANNEL_CLOSE", 98: "CHANNEL_REQUEST",
             99: "CHANNEL_SUCCESS", 100: "CHANNEL_FAILURE"}


# -- the traced interpreter ----------------------------------------------------------------

_t0 = float(os.environ.get(T0_ENV, "0") or 0) or time.time()
_events: list[tuple[float, str, str]] = []


def _note(what: str) -> None:
    _events.append(((time.time() - _t0) * 1000, threading.current_thread().name, what))


def _ssh_text(data: bytes) -> str:
    kind = data[0] if data else -1
    name = SSH_NAMES.get(kind, str(kind))
    if 91 <= kind <= 100 and len(data) >= 5:
        name += f" ch{int.from_bytes(data[1:5], 'big')}"
    if kind == 98 and len(data) >= 9:
        size = int.from_bytes(data[5:9], "big")
        name += " " + data[9 : 9 + size].decode("ascii", "replace")
        want = data[9 + size : 10 + size]
        name += " (wants reply)" if want == b"\x01" else ""
    if kind == 94:
        name += f" {len(data) - 9} B"
    if kind == 90 and len(data) >= 5:
        size = int.from_bytes(data[1:5], "big")
        name += " " + data[5 : 5 + size].decode("ascii", "replace")
    return name


def _wrap(owner: Any, name: str, label: str) -> None:
    original = getattr(owner, name)

    def traced(*args: Any, **kwargs: Any) -> Any:
        _note(f"call {label}")
        try:
            return original(*args, **kwargs)
        finally:
            _note(f"done {label}")

    setattr(owner, name, traced)


def _patch_paramiko(packet: Any) -> None:
    packetizer = packet.Packetizer
    send, read = packetizer.send_message, packetizer.read_message

    def send_message(self: Any, data: Any) -> Any:
        _note("> " + _ssh_text(data.asbytes()))
        return send(self, data)

    def read_message(self: Any) -> Any:
        cmd, message = read(self)
        _note("< " + _ssh_text(bytes([cmd]) + message.asbytes()))
        return cmd, message

    packetizer.send_message, packetizer.read_message = send_message, read_message


class _Watcher(importlib.abc.MetaPathFinder):
    """Times the watched imports and patches modules as they finish loading."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        watched = fullname in WATCHED_IMPORTS
        steps = [s for s in STEPS if s[0] == fullname]
        if not (watched or steps or fullname == "paramiko.packet"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            if watched:
                _note(f"import {fullname}")
            run(module)
            if watched:
                _note(f"imported {fullname}")
            if fullname == "paramiko.packet":
                _patch_paramiko(module)
            for _, cls, func in steps:
                _wrap(getattr(module, cls) if cls else module, func, f"{cls + '.' if cls else ''}{func}")

        loader.exec_module = exec_module
        return spec


def child_main(argv: list[str]) -> None:
    _note("interpreter up")
    sys.meta_path.insert(0, _Watcher())
    import herald.cli

    code = herald.cli.main(argv)
    _note(
        "main returned; threads left: "
        + ", ".join(
            f"{t.name}{'' if t.daemon else ' (not daemon)'}"
            for t in threading.enumerate()
            if t is not threading.current_thread()
        )
    )
    with open(os.environ[OUT_ENV], "w") as out:
        json.dump(_events, out)
    getattr(herald.cli, "leave", sys.exit)(code)  # as `python -m herald` ends (an older checkout: sys.exit)


# -- the driver ----------------------------------------------------------------------------

def _show(events: list[tuple[float, str, str]], exit_ms: float, rtt_ms: float) -> int:
    waits, last_wire, last = 0, 0.0, 0.0
    for at, thread, what in events:
        mark = ""
        if what.startswith(("> ", "< ")):
            if what.startswith("< ") and at - last_wire >= 0.7 * rtt_ms:
                waits, mark = waits + 1, "WAIT"
            last_wire = at
        print(f"{at:8.1f} {at - last:+7.1f}  {mark:4} {thread[:22]:22} {what}")
        last = at
    print(f"{exit_ms:8.1f} {exit_ms - last:+7.1f}       {'(driver)':22} process exit")
    return waits


def run(rtt: float, runs: int, tree: str | None = None) -> None:
    """`tree`: the Herald checkout the traced CLI imports (default: this one)."""
    import subprocess

    from bench.exec_mode_bench import cli_environment
    from tests.fixtures.latency_proxy import proxy_process
    from tests.fixtures.sshd import running_sshd

    with running_sshd() as server, proxy_process((server.host, server.port), rtt) as port:
        workspace = server.make_workspace()
        spec, overrides = server.through(port) if rtt > 0 else (server.spec, server.overrides())
        home, env = cli_environment("herald-bench-timeline-", overrides)
        if tree:
            env["PYTHONPATH"] = tree
        argv = ["exec", "-", "--backend", spec, "--cwd", workspace, "--exec-mode", "backend"]
        try:
            for attempt in range(runs + 1):  # the first run writes the bytecode caches: not shown
                out = home / f"events-{attempt}.json"
                env[OUT_ENV] = str(out)
                env[T0_ENV] = repr(time.time())
                started = time.perf_counter()
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *argv],
                                      input="print(1)\n", env=env, capture_output=True, text=True, timeout=120)
                exit_ms = (time.perf_counter() - started) * 1000
                if proc.returncode != 0 or proc.stdout != "1\n":
                    raise RuntimeError(f"herald exec failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
                if attempt == 0:
                    continue
                print(f"\n== cold herald exec --exec-mode backend print(1), RTT {rtt * 1000:.0f} ms, run {attempt} ==")
                waits = _show(json.loads(out.read_text()), exit_ms, rtt * 1000)
                print(f"total {exit_ms:.0f} ms; {waits} waits for the peer (round trips on the critical path)")
        finally:
            server.remove_workspace(workspace)
            import shutil

            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child_main(sys.argv[2:])
    else:
        import argparse

        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--rtt", type=float, default=0.010)
        parser.add_argument("--runs", type=int, default=1)
        parser.add_argument("--tree", help="the Herald checkout to trace (default: the one imported here)")
        options = parser.parse_args()
        run(options.rtt, options.runs, options.tree)
