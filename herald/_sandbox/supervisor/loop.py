"""In-backend execution, the backend's side: a supervisor between Herald and the script.

Stdlib only, Python >= 3.8. It runs on the backend's exec channel (a local pipe pair, an SSH
channel, a Docker exec socket, a Modal exec stream): the first run's is the setup's own process,
which serves once it has unpacked the sandbox (runtime/sandbox/backend/sandbox.py); later ones
Herald starts as `python3 -I -B -c <loader> SANDBOX_DIR`. Its stdin and stdout are the whole link
to Herald and carry length-prefixed JSON frames (wire/framing.py) both ways, multiplexing everything:
Herald's prepare, start, code, kill, close and cwd frames and the replies to the script's calls
one way; the script's output, its calls (each tagged with its connection's number), ready, done,
exit, failed, the records of the calls answered here and removed the other: the types and their
guards are wire/frames.py's (its "Exec channel") and wire/guards.py's; the grant a start or code
frame carries, wire/grant.py's.

Why a separate supervisor process: it must stay responsive while the script runs anything at all
(a C call holding the GIL, a blocked write), so that a kill frame or the end of its stdin always
takes the script down. The script interpreter is exactly the host mode's (child/bootstrap.py), in its
own session and process group with stdin from /dev/null and stdout/stderr on pipes read here:
forked by the Runtime's zygote when "fork_server" names its socket, else (or if that fails)
spawned, see supervisor/scriptproc.py. This process lives for one run (or one kernel session); the zygote,
on an exec channel of its own, for the Runtime, so every run after the first few is a fork.
Its `hermes_tools` client connects to a Unix socket in the private sandbox directory that
only this process serves (supervisor/connections.py); the first frame must carry a token that never leaves the
backend. Each connection (a forked child makes its own) is tagged with a number on the stream.

A one-shot script says it is leaving on its control pipe once its output is flushed and what it
started is killed (child/bootstrap.py): the exit goes to Herald then, with the rest of its output,
not after its process is torn down (about 2 ms later, more through the zygote); this process
still reaps it and kills what is left of its group before it leaves. Just before that last
flush the script says "leaving": what it writes from then on waits here for the exit (within
LEAVE_HOLD_SECONDS) and both go in one write, so one packet, not two, crosses a remote link
(the second, a fraction of a millisecond later, would reach Herald that much later).

The loop never blocks on a write: frames wait in per-destination queues, and the script's output
is not read while too much of it waits for Herald, so the script blocks on a full pipe exactly as
in host mode. When Herald goes away (end of stdin, SIGTERM, SIGHUP) the whole tree is killed.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import traceback
from typing import Any, Dict, List, Literal, Optional, cast

from ..beside.localtools import LocalTools
from ..procs.child import ChildProc
from ..wire import frames
from ..wire import guards as wire
from ..wire.framing import MAX_CONTROL_FRAME_BYTES, FrameBuffer, ProtocolError, encode_frame
from .connections import Relay
from .scriptproc import HeldScript
from .sinks import JOIN_LIMIT, Sink

READ_SIZE = 1 << 16
WIRE_HIGH_WATER = 4 << 20  # bytes queued for Herald before the script's output is left unread
EXIT_SETTLE_SECONDS = 2.0  # after the script exits, how long a leftover holder of its pipes may stall us
IDLE_CHECK_SECONDS = 1.0  # re-check the script's exit this often even without SIGCHLD
LEAVE_HOLD_SECONDS = 0.05  # after "leaving", how long the script's last output may wait for its exit


class Supervisor:
    def __init__(self, sandbox_dir: str, wire_in: int, wire_out: int) -> None:
        self.sandbox_dir = sandbox_dir
        self.wire_in = wire_in
        self.inbox = FrameBuffer()
        self.wire = Sink(wire_out)
        self.relay = Relay(self.route)
        self.script = HeldScript(sandbox_dir)
        self.outputs: Dict[int, Literal["out", "err"]] = {}  # script stdout/stderr read ends -> OUT/ERR
        self.ctl_in: Optional[int] = None  # the script's control frames ("ready", "done")
        self.ctl_frames = FrameBuffer(MAX_CONTROL_FRAME_BYTES)
        self.ctl: Optional[Sink] = None  # frames to the script's bootstrap
        self.reported: Optional[int] = None  # the exit status the script sent on its control pipe
        self.exited_at: Optional[float] = None
        self.exit_sent = False  # the script's own exit status went to Herald before its process was gone
        self.leaving_at: Optional[float] = None  # the script said "leaving": Herald's frames wait for its exit
        self.wake_r, self.wake_w = os.pipe()
        for fd in (wire_in, wire_out, self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        self.local = LocalTools(self.wake_w)
        self.started = False
        self.mode = ""  # the run's, once started: "oneshot" or "kernel"
        self.remove_dir = False  # Herald's goodbye asked for the sandbox directory to go with us

    # -- the script interpreter ------------------------------------------------------------

    def prepare(self, message: frames.PrepareFrame) -> None:
        # A script in its own network namespace (bwrap) cannot see an abstract name, and
        # Landlock's scoping refuses one: it reaches a long path through its directory instead
        # (client.at_unix_path), as the bind does.
        confined = (message.get("isolation") or {}).get("mode") in ("bwrap", "landlock")
        self.relay.listen(self.sandbox_dir, abstract_ok=not confined)
        self.local.set_specs(message.get("tool_specs"))
        self.hold(self.script.start(dict(message)))
        self.local.load()  # while the script's interpreter starts

    def hold(self, child: ChildProc) -> None:
        os.set_blocking(child.ctl_out, False)  # written from a Sink: the loop never blocks on it
        self.outputs = {child.stdout: frames.OUT, child.stderr: frames.ERR}
        self.ctl_in, self.ctl = child.ctl_in, Sink(child.ctl_out)
        self.ctl_frames = FrameBuffer(MAX_CONTROL_FRAME_BYTES)

    def respawn_if_dead(self) -> bool:
        """The script died unused (with its zygote): the run goes to a new one. True if it did."""
        child = self.script.replace_if_dead(self.started)
        if child is not None:
            self.hold(child)
        return child is not None

    def terminate(self, grace: float) -> None:
        if self.exited_at is None:
            self.script.stop(grace)

    # -- frames ----------------------------------------------------------------------------

    def send(self, message: frames.FromSupervisor) -> None:
        self.wire.push(encode_frame(message))

    def from_herald(self, message: Dict[str, Any]) -> None:
        try:
            frame = wire.to_supervisor(message)
        except wire.FrameError:
            return  # not ours to act on
        if "type" not in frame:  # a tool call's reply
            number = frame.pop("conn")
            self.relay.reply(number, encode_frame(frame))
        elif frame["type"] == frames.PREPARE and self.script.child is None:
            self.prepare(frame)
        elif frame["type"] == frames.START and self.ctl is not None:
            self.respawn_if_dead()
            self.started = True
            self.mode = str(frame.get("mode"))
            start = cast(frames.StartFrame, {"type": frames.START, **{key: frame.get(key) for key in frames.RUN_KEYS}})
            start["socket"], start["token"] = self.relay.socket_path, self.relay.token
            self.ctl.push(encode_frame(start))  # first: the script starts while we take the grant
            self.local.set_grant(frame.get("tools"))
        elif frame["type"] == frames.CODE and self.ctl is not None:
            self.local.set_grant(frame.get("tools"))
            cell: frames.CodeFrame = {
                "type": frames.CODE,
                "code": frame["code"],
                "line_buffered": frame.get("line_buffered"),
            }
            self.ctl.push(encode_frame(cell))
        elif frame["type"] == frames.CWD:
            self.local.set_cwd(frame["cwd"])
        elif frame["type"] == frames.KILL:
            self.terminate(float(frame["grace"]))
        elif frame["type"] == frames.CLOSE:
            self.remove_dir = frame.get("remove") is True
            raise EOFError("Herald closed the run")

    def from_script(self, message: Dict[str, Any]) -> None:
        try:  # the script shares the control pipe's process: what is not a frame of it is dropped
            frame = wire.from_child(message)
        except wire.FrameError:
            return
        if frame["type"] == frames.READY:
            self.send({"type": frames.READY})
        elif frame["type"] == frames.DONE:
            self.send({"type": frames.DONE, "exit_code": frame["exit_code"]})
        elif frame["type"] == frames.LEAVING and self.leaves_by_itself() and not self.exit_sent:
            self.leaving_at = time.monotonic()
        elif frame["type"] == frames.EXIT:
            self.reported = frame["exit_code"]
            if self.leaves_by_itself():
                self.report_exit(self.reported)

    def leaves_by_itself(self) -> bool:
        """A one-shot script not being killed: what it says of its exit is its run's end."""
        return self.script.clock is None and self.mode == "oneshot"

    def report_exit(self, status: int) -> None:
        """The script says it is exiting with `status`, after flushing its output and killing
        what it started (child/bootstrap.py): Herald gets the rest of its output and the exit now,
        not after the process has been torn down and the zygote has told us (about 2 ms
        more); the loop still reaps it and kills what is left of its group before leaving."""
        for fd in list(self.outputs):
            while fd in self.outputs:
                chunk = self.read(fd)
                if not chunk:
                    if chunk is not None:
                        del self.outputs[fd]
                    break
                self.send({"type": self.outputs[fd], "data": chunk.decode("latin-1")})
        self.send_exit(status)

    def send_exit(self, status: int) -> None:
        self.local.wait_idle(EXIT_SETTLE_SECONDS)
        self.local_calls_done()  # their records count in the run's calls: before the exit frame
        self.send({"type": frames.EXIT, "exit_code": status})
        self.exit_sent = True

    def route(self, call: frames.CallFrame) -> None:
        """A call from the script: answered here (beside/localtools.py) or sent on to Herald."""
        if not self.local.route(call):
            self.send(call)

    def local_calls_done(self) -> None:
        """Replies of calls answered here to their connections, records and hand-overs to Herald."""
        for number, frame, record in self.local.finished():
            if number is None:
                self.send(frame)
                continue
            self.relay.reply(number, frame)
            if record is not None:
                self.send(record)

    # -- the loop --------------------------------------------------------------------------

    def readers(self) -> List[int]:
        fds = [self.wire_in, self.wake_r]
        if self.ctl_in is not None:
            fds.append(self.ctl_in)
        child = self.script.child
        if child is not None and child.watch is not None:
            fds.append(child.watch)  # the zygote's word on a forked script's exit
        if self.wire.size < WIRE_HIGH_WATER:
            fds.extend(self.outputs)
            fds.extend(self.relay.readers())
        return fds

    def sinks(self) -> List[Sink]:
        sinks = [self.wire, *self.relay.sinks()]
        if self.ctl is not None:
            sinks.append(self.ctl)
        return [sink for sink in sinks if sink.chunks and not sink.corked]

    def holding(self, now: float) -> bool:
        """The script is leaving and its exit has not been sent: Herald's frames wait for it
        (in one write with it), unless it takes longer than LEAVE_HOLD_SECONDS or too much waits."""
        if self.leaving_at is None:
            return False
        if self.exit_sent or now - self.leaving_at > LEAVE_HOLD_SECONDS or self.wire.size > JOIN_LIMIT:
            self.leaving_at = None
            return False
        return True

    def run(self) -> None:
        while True:
            now = time.monotonic()
            clock = self.script.clock
            if clock is not None:
                clock.tick(now)
            if self.exited_at is None and self.script.exited() and not self.respawn_if_dead():
                self.exited_at = now
                self.script.kill_group()
            if self.exited_at is not None and (not self.outputs or now - self.exited_at > EXIT_SETTLE_SECONDS):
                self.finish()
                return
            waits = [IDLE_CHECK_SECONDS]
            kill_due = clock.wait(now) if clock is not None else None
            if kill_due is not None:
                waits.append(kill_due)
            if self.exited_at is not None:
                waits.append(self.exited_at + EXIT_SETTLE_SECONDS - now)
            if self.leaving_at is not None:
                waits.append(self.leaving_at + LEAVE_HOLD_SECONDS - now)
            interest = dict.fromkeys(self.readers(), select.POLLIN)
            sinks = {sink.fd: sink for sink in self.sinks()}
            for fd in sinks:
                interest[fd] = interest.get(fd, 0) | select.POLLOUT
            poller = select.poll()
            for fd, mask in interest.items():
                poller.register(fd, mask)
            ready = poller.poll(max(0.0, min(waits)) * 1000)
            self.wire.corked = True  # what this turn sends Herald goes in one write (one packet), at its end
            try:
                for fd, events in ready:
                    if fd in sinks and events & (select.POLLOUT | select.POLLERR | select.POLLHUP):
                        sinks[fd].flush()
                    if interest[fd] & select.POLLIN and events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                        self.readable(fd)
            finally:
                if not self.holding(time.monotonic()):
                    self.wire.uncork()
            if self.wire.broken:
                raise EOFError("the link to Herald broke")

    def readable(self, fd: int) -> None:
        if self.relay.owns(fd):
            self.relay.readable(fd, self.read)
            return
        chunk = self.read(fd)
        if chunk is None:
            return
        if fd == self.wire_in:
            if not chunk:
                raise EOFError("Herald closed the link")
            for message in self.inbox.feed(chunk):
                self.from_herald(message)
        elif fd == self.wake_r:
            self.local_calls_done()  # a local call finished, or a SIGCHLD woke us (the loop checks the exit)
        elif fd in self.outputs:
            if chunk and not self.exit_sent:  # after the exit: a dying descendant's last words
                self.send({"type": self.outputs[fd], "data": chunk.decode("latin-1")})
            else:
                del self.outputs[fd]
        elif fd == self.ctl_in:
            if not chunk:
                self.ctl_in = None
                return
            try:  # the script shares the control pipe's process: a bad frame from it is skipped
                messages = self.ctl_frames.feed(chunk, skip_bad=True)
            except ProtocolError:  # an impossible length: the rest of the pipe is read and dropped
                messages = []
            for message in messages:
                self.from_script(message)

    def read(self, fd: int) -> Optional[bytes]:
        """Bytes from `fd`; b"" at its end; None when it had nothing after all."""
        child = self.script.child
        if child is not None and fd == child.watch:
            child.readable()  # a message from the zygote; the loop checks for the exit
            return None
        try:
            return os.read(fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return b""

    def finish(self) -> None:
        """The script interpreter is gone: reap it, report its status, hand over what is queued."""
        status = self.script.reap()
        if status is None:  # forked, and the zygote died before it could tell: ask the script
            if self.ctl_in is not None:
                self.readable(self.ctl_in)  # its last frame may still wait in the pipe
            status = self.script.lost_status(self.reported)
        if not self.exit_sent:
            self.send_exit(status)
        self.drain_wire()

    def drain_wire(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.wire.chunks and not self.wire.broken and time.monotonic() < deadline:
            select.select([], [self.wire.fd], [], max(0.0, deadline - time.monotonic()))
            self.wire.flush()

    def close(self) -> None:
        self.local.close()
        self.script.close()
        self.relay.close()

    def remove_sandbox_dir(self) -> None:
        """Herald's goodbye asked for it (its Runtime is closing): the directory goes with this
        process, and Herald hears whether it went (else it removes it itself), instead of
        starting a process there only for that (over Docker an exec, ~0.1 s; over SSH two
        round trips)."""
        import shutil  # only now: most supervisors never need it

        shutil.rmtree(self.sandbox_dir, ignore_errors=True)
        self.send({"type": frames.REMOVED, "ok": not os.path.lexists(self.sandbox_dir)})
        self.drain_wire(timeout=5.0)


def main() -> None:
    # The stream is ours alone: keep private copies of stdin/stdout and point fds 0-2 at
    # /dev/null, so nothing else (a warning, a library's print) can corrupt the frames.
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    supervisor = Supervisor(sys.argv[1], wire_in, wire_out)

    def on_signal(signum: int, frame: Any) -> None:
        supervisor.script.kill_everything()
        supervisor.close()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(supervisor.wake_w)
    try:
        supervisor.run()
    except EOFError:
        supervisor.script.kill_everything()
    except BaseException:
        supervisor.script.kill_everything()
        supervisor.send({"type": frames.FAILED, "error": traceback.format_exc()})
        supervisor.drain_wire(timeout=5.0)
    finally:
        supervisor.close()
    if supervisor.remove_dir:
        supervisor.remove_sandbox_dir()
    os._exit(0)
