"""One authenticated SSH connection: TCP with TCP_NODELAY, host key checking, key or agent auth.

paramiko leaves Nagle's algorithm on; every new channel then waits on the peer's delayed ACK
(about 40 ms), so the socket is made here and handed to paramiko with TCP_NODELAY set.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

import paramiko
from paramiko.common import cMSG_CHANNEL_REQUEST

from ...config import SSHSettings
from ..base import BackendError
from .sftp import SFTPSession, SFTPTimeout
from .target import SSHTarget

log = logging.getLogger(__name__)

HOST_KEY_POLICIES = ("strict", "accept-new")
# How long housekeeping (stopping a process, removing the session's files) waits for a silent
# host before giving the connection up.
HOUSEKEEPING_SECONDS = 2.0
# A channel that has heard nothing for this long asks the host for a sign of life (a keepalive
# that wants an answer), at most once per this long: a link that went dark is found out within
# about PROBE_AFTER_SECONDS + HOUSEKEEPING_SECONDS, not when TCP gives up many minutes later.
PROBE_AFTER_SECONDS = 2.0
SFTP_SESSIONS = 4  # SFTP channels per connection: concurrent file calls (parallel()) overlap

# paramiko logs every failed handshake with a traceback; Herald reports the failure itself. With
# a handler on its logger, Python's last-resort stderr output stays quiet when the application
# configured no logging (records still reach the application's own handlers if it did).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class _HostKeyPolicy:
    """paramiko's missing-host-key policy: an unknown host is refused (strict), or recorded in
    known_hosts and trusted (accept-new). A known host with a different key never gets here."""

    def __init__(self, target: SSHTarget, policy: str, known_hosts: str) -> None:
        self._target = target
        self._policy = policy
        self._known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if self._policy != "accept-new":
            name = self._target.known_hosts_name
            port = f"-p {self._target.port} " if self._target.port != 22 else ""
            raise BackendError(
                f"{name} is not in {self._known_hosts}, so its identity cannot be checked "
                f"(it offers {key.get_name()} {key.fingerprint}). Compare that fingerprint with the "
                f"host's own, then add it (ssh-keyscan {port}{self._target.host} >> {self._known_hosts}), "
                'or set ssh.host_key_policy = "accept-new" to trust and record the key on first connection.'
            )
        directory = os.path.dirname(self._known_hosts)
        if directory:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(self._known_hosts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def _tcp_socket(target: SSHTarget, timeout: float | None, keepalive: float) -> socket.socket:
    where = f"{target.host} port {target.port}"
    try:
        sock = socket.create_connection((target.host, target.port), timeout=timeout)
    except socket.gaierror as exc:
        raise BackendError(f"cannot resolve the SSH host name {target.host!r}: {exc.strerror}") from None
    except TimeoutError:
        raise BackendError(
            f"no answer from {where} within {timeout:g} s (setting ssh.connect_timeout): "
            "check the host name, that the host is up, and that no firewall drops the connection"
        ) from None
    except ConnectionRefusedError:
        raise BackendError(
            f"{where} refused the connection: is sshd running there and listening on that port?"
        ) from None
    except OSError as exc:
        raise BackendError(f"cannot reach {where}: {exc.strerror or exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if keepalive > 0 and hasattr(socket, "TCP_KEEPIDLE"):
        # The kernel notices a peer that vanished without a word (no RST) and fails the socket.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, max(1, int(keepalive)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, int(keepalive)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    return sock


def request_exec(channel: paramiko.Channel, command: str) -> None:
    """Ask the host to run `command` on `channel` without waiting for its answer.

    paramiko's exec_command waits a round trip for the host's "started" before anything can be
    sent; nothing here needs it: stdin sent after the request reaches the command (the host
    handles a channel's messages in order), and a refused request makes paramiko close the
    channel, which its reader sees as the end of the output. The message is exec_command's own.
    """
    if channel.closed or channel.eof_received or channel.eof_sent or not channel.active:
        raise paramiko.SSHException("the channel is closed")
    message = paramiko.Message()
    message.add_byte(cMSG_CHANNEL_REQUEST)
    message.add_int(channel.remote_chanid)
    message.add_string("exec")
    message.add_boolean(True)  # the answer still comes: a refusal closes the channel (see above)
    message.add_string(command)
    channel.transport._send_user_message(message)


def connect(target: SSHTarget, settings: SSHSettings) -> SSHConnection:
    """Open and authenticate a connection, or raise BackendError saying what to fix."""
    if settings.host_key_policy not in HOST_KEY_POLICIES:
        raise BackendError(
            f"setting ssh.host_key_policy is {settings.host_key_policy!r}; use 'strict' or 'accept-new'"
        )
    timeout = settings.connect_timeout or None
    known_hosts = os.path.expanduser(settings.known_hosts)
    key_file = os.path.expanduser(settings.key_file) if settings.key_file else None
    if key_file and not os.path.isfile(key_file):
        raise BackendError(f"the SSH key file {key_file} (setting ssh.key_file) does not exist")
    client = paramiko.SSHClient()
    try:
        if os.path.exists(known_hosts):
            client.get_host_keys().load(known_hosts)
    except OSError as exc:
        raise BackendError(f"cannot read {known_hosts} (setting ssh.known_hosts): {exc.strerror}") from None
    client.set_missing_host_key_policy(_HostKeyPolicy(target, settings.host_key_policy, known_hosts))
    sock = _tcp_socket(target, timeout, settings.keepalive)
    started = time.monotonic()
    try:
        client.connect(
            target.host,
            port=target.port,
            username=target.user,
            sock=sock,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            key_filename=key_file,
            allow_agent=settings.use_agent,
            look_for_keys=key_file is None,
        )
    except BaseException as exc:
        client.close()
        sock.close()
        if isinstance(exc, Exception):
            timed_out = timeout is not None and time.monotonic() - started >= timeout * 0.9
            raise _connect_error(exc, target, settings, known_hosts, timed_out) from None
        raise
    transport = client.get_transport()
    assert transport is not None
    if settings.keepalive > 0:
        transport.set_keepalive(max(1, int(settings.keepalive)))
    return SSHConnection(client, transport, target, timeout or 30.0)


def _connect_error(
    exc: Exception, target: SSHTarget, settings: SSHSettings, known_hosts: str, timed_out: bool
) -> BackendError:
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        name = target.known_hosts_name
        return BackendError(
            f"the host key of {name} has CHANGED: {known_hosts} has {exc.expected_key.get_name()} "
            f"{exc.expected_key.fingerprint}, the server offered {exc.key.get_name()} {exc.key.fingerprint}. "
            "Someone may be intercepting the connection, so it was refused. If the host was really "
            f"reinstalled, remove the old key (ssh-keygen -R '{name}' -f {known_hosts}) and connect again."
        )
    if isinstance(exc, paramiko.PasswordRequiredException):
        return BackendError(
            f"the key {settings.key_file} is protected by a passphrase: add it to an ssh-agent "
            "(ssh-add) and leave ssh.key_file empty, or use a key without one"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        tried = [f"the key {settings.key_file}"] if settings.key_file else ["~/.ssh/id_* keys"]
        if settings.use_agent:
            tried.append("the ssh-agent's keys" + ("" if os.environ.get("SSH_AUTH_SOCK") else " (none running)"))
        return BackendError(
            f"{target} refused the login ({exc}); tried {' and '.join(tried)}. Set ssh.key_file to a "
            f"private key whose public half is in {target.user}'s ~/.ssh/authorized_keys on {target.host}."
        )
    if timed_out or isinstance(exc, TimeoutError):  # (paramiko words a slow handshake in several ways)
        return BackendError(
            f"{target.host} port {target.port} accepted the connection but did not complete the SSH "
            f"handshake within {settings.connect_timeout:g} s (setting ssh.connect_timeout): is it an SSH server?"
        )
    return BackendError(f"SSH connection to {target} failed: {type(exc).__name__}: {exc}")


class SSHConnection:
    """A live connection: channels for processes, a few SFTP sessions for files (made on demand,
    so that concurrent file calls overlap), a deadline on every wait for the host.

    When the host stays silent past a deadline the connection is abandoned (closed here, as
    paramiko would only notice a dead TCP peer after many minutes): every wait on it ends at
    once, `alive()` turns False, and the backend's next call reconnects.
    """

    def __init__(
        self, client: paramiko.SSHClient, transport: paramiko.Transport, target: SSHTarget, timeout: float
    ) -> None:
        self.client = client
        self.transport = transport
        self.target = target
        self.timeout = timeout
        self.abandoned = ""  # why the connection was given up, if it was
        self.abandoned_at = 0.0
        self.default_mode: int | None = None  # the mode SFTP gives new files (learned on the first write)
        self._pool: list[SFTPSession] = []
        self._sessions = 0
        self._pool_ready = threading.Condition()
        self.last_heard = time.monotonic()  # when a channel of this connection last got data
        self._probe_lock = threading.Lock()
        self._probing = False
        self._probed_at = 0.0
        self._retired = (0, 0)  # (requests, round trips) of SFTP sessions closed so far

    def alive(self) -> bool:
        return not self.abandoned and bool(self.transport.is_active())

    def abandon(self, why: str) -> None:
        """Give the connection up: close it without waiting for the host."""
        if not self.abandoned:
            self.abandoned, self.abandoned_at = why, time.monotonic()
            log.info("abandoning the SSH connection to %s: %s", self.target, why)
        with contextlib.suppress(Exception):
            self.transport.close()
        with self._pool_ready:
            self._pool_ready.notify_all()

    def heard(self) -> None:
        self.last_heard = time.monotonic()

    def probe(self) -> None:
        """Check in the background that the host still answers; if neither the answer nor any
        other data comes within HOUSEKEEPING_SECONDS, abandon the connection (so every wait on
        it ends). At most one probe at a time, and one per PROBE_AFTER_SECONDS."""
        with self._probe_lock:
            now = time.monotonic()
            if self._probing or now - self._probed_at < PROBE_AFTER_SECONDS or not self.alive():
                return
            self._probing, self._probed_at = True, now
        threading.Thread(target=self._probe, args=(now,), daemon=True, name="herald-ssh-probe").start()

    def _probe(self, started: float) -> None:
        answered = threading.Event()

        def ask() -> None:
            with contextlib.suppress(Exception):
                self.transport.global_request("keepalive@openssh.com", wait=True)  # any answer will do
                answered.set()

        try:
            threading.Thread(target=ask, daemon=True, name="herald-ssh-keepalive").start()
            if not answered.wait(HOUSEKEEPING_SECONDS) and self.last_heard < started and self.alive():
                self.abandon(f"no sign of life within {HOUSEKEEPING_SECONDS:g} s of a keepalive")
        finally:
            with self._probe_lock:
                self._probing = False

    @contextlib.contextmanager
    def deadline(self, seconds: float, what: str) -> Iterator[None]:
        """Abandon the connection if the block has not ended within `seconds` (for paramiko
        calls that wait without a time limit: exec and subsystem requests)."""
        timer = threading.Timer(seconds, self.abandon, args=(f"{what}: no answer within {seconds:g} s",))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
        if self.abandoned:
            raise BackendError(f"{self.target} did not answer ({what}) within {seconds:g} s: the link or the host "
                               "is down; the next call reconnects")

    def session(self, timeout: float | None = None) -> paramiko.Channel:
        try:
            channel = self.transport.open_session(timeout=timeout or self.timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if self.transport.is_active() and not self.abandoned:
                self.abandon("a channel could not be opened")  # open_session timed out: the host is silent
            raise BackendError(f"cannot open a channel to {self.target}: {exc or type(exc).__name__}") from None
        return channel

    def exec(self, command: str, *, timeout: float, answer: float | None = None) -> tuple[int, bytes]:
        """Run `command` (by the login shell) to the end: (exit status, stdout+stderr), within
        `timeout` in all, the channel opened within `answer` (else BackendError, and the
        connection is abandoned)."""
        end = time.monotonic() + timeout
        channel = self.session(min(timeout, answer or timeout))
        try:
            with self.deadline(max(0.001, end - time.monotonic()), "a command"):
                channel.set_combine_stderr(True)
                channel.settimeout(max(0.001, end - time.monotonic()))
                request_exec(channel, command)
                output = bytearray()
                while chunk := channel.recv(1 << 16):
                    output += chunk
                if not channel.status_event.wait(max(0.0, end - time.monotonic())):
                    raise BackendError(f"a command on {self.target} did not finish within {timeout:g} s")
            return channel.exit_status, bytes(output)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if isinstance(exc, TimeoutError):
                self.abandon("a command's output stopped coming")
            raise BackendError(f"running a command on {self.target} failed: {exc or type(exc).__name__}") from None
        finally:
            with contextlib.suppress(Exception):
                channel.close()

    @contextlib.contextmanager
    def sftp(self) -> Iterator[SFTPSession]:
        """An SFTP session for this thread alone: an idle one, a new one (up to SFTP_SESSIONS),
        or the next one given back. A session that failed or timed out is closed, not reused;
        one that timed out abandons the connection."""
        session = self._borrow()
        try:
            yield session
        except SFTPTimeout as exc:
            session.broken = True
            self.abandon(str(exc))
            raise
        finally:
            with self._pool_ready:
                if session.broken or not self.alive():
                    self._sessions -= 1
                    self._retired = (self._retired[0] + session.requests, self._retired[1] + session.round_trips)
                    session.close()
                else:
                    self._pool.append(session)
                self._pool_ready.notify()

    def _borrow(self) -> SFTPSession:
        with self._pool_ready:
            while True:
                if not self.alive():
                    raise BackendError(f"the SSH connection to {self.target} is closed")
                if self._pool:
                    return self._pool.pop()
                if self._sessions < SFTP_SESSIONS:
                    self._sessions += 1
                    break
                self._pool_ready.wait(1.0)
        try:
            return self._open_sftp()
        except BaseException:
            with self._pool_ready:
                self._sessions -= 1
                self._pool_ready.notify()
            raise

    def _open_sftp(self) -> SFTPSession:
        channel = self.session()
        try:
            with self.deadline(self.timeout, "starting SFTP"):
                channel.invoke_subsystem("sftp")
            return SFTPSession(channel, timeout=self.timeout, where=str(self.target), heard=self.heard)
        except SFTPTimeout as exc:
            channel.close()
            self.abandon(str(exc))
            raise
        except (paramiko.SSHException, EOFError, OSError, BackendError) as exc:
            channel.close()
            raise BackendError(f"cannot start SFTP on {self.target} (is the sftp subsystem enabled?): {exc}") from None

    def sftp_sessions(self) -> tuple[int, int]:
        """(SFTP sessions open, of which lent out now): diagnostics."""
        with self._pool_ready:
            return self._sessions, self._sessions - len(self._pool)

    def sftp_counts(self) -> tuple[int, int]:
        """(requests sent, round trips waited for) on this connection's SFTP sessions not in use
        now: diagnostics, and what tests count file operations' round trips with."""
        with self._pool_ready:
            requests, round_trips = self._retired
            return requests + sum(s.requests for s in self._pool), round_trips + sum(s.round_trips for s in self._pool)

    def close(self) -> None:
        with self._pool_ready:
            pool, self._pool = self._pool, []
        for session in pool:
            session.close()
        with contextlib.suppress(Exception):
            self.client.close()
