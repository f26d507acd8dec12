"""The Modal backend: a Modal sandbox per session (`modal.Sandbox.create`), commands in a
persistent bash over `Sandbox.exec` streams, files through `sandbox.filesystem`.

Everything that is not a Modal SDK call is shared with the Docker backend (`ExecSessionBackend`,
`PersistentShell`, the launch wrapper and kill-tree command, the atomic replace of
`ShellFiles`), so the Docker tests cover it. The SDK retries for about a minute against a server
it cannot reach: the first request is bounded by `modal.connect_timeout`, and missing
credentials are reported before any request.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat as st_mod
from typing import Any

from ...config import Settings
from ..base import BackendError, DirEntry, FileStat, check_length, check_regular
from ..execbackend import ExecSessionBackend
from ..remote import IDLE_COMMAND
from ..shell import shell_quote
from .channel import LoopThread, ModalChannel, SDKTimeout

SANDBOX_CREATE_TIMEOUT = 900.0  # building or pulling the image on Modal's side can take minutes
CALL_TIMEOUT = 120.0  # one file operation, poll, terminate or snapshot
MAX_LINK_DEPTH = 8


def credentials_problem() -> str | None:
    """Why the Modal SDK cannot authenticate here, or None (checked without any request)."""
    try:
        from modal.config import config
    except ImportError:
        return "the modal backend needs the modal package: pip install 'herald[modal]'"
    if os.environ.get("MODAL_IS_REMOTE") == "1":
        return None  # inside Modal the container's identity is used
    if config.get("token_id") and config.get("token_secret"):
        return None
    return ("no Modal credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or run `modal token new` "
            "(it writes ~/.modal.toml)")


class ModalBackend(ExecSessionBackend):
    name = "modal"
    kind_of_sandbox = "Modal sandbox"

    def __init__(self, image: str | None = None, *, settings: Settings | None = None, cwd: str | None = None) -> None:
        settings = settings or Settings()
        self.options = settings.modal
        super().__init__(image or self.options.image, settings=settings, cwd=cwd or self.options.workdir or "/")
        self._loop: LoopThread | None = None
        self._sandbox: Any = None
        self._client: Any = None
        self.sandbox_id = ""
        self.snapshot_image_id = ""  # set on close with modal.snapshot_on_close

    # -- the sandbox -----------------------------------------------------------------------

    def _sandbox_ready(self) -> str:
        if self._sandbox is None:
            problem = credentials_problem()
            if problem:
                raise BackendError(problem)
            if self._loop is None:
                self._loop = LoopThread()
            import modal
            from modal.config import config

            server = config.get("server_url")
            tokens = (config.get("token_id"), config.get("token_secret"))
            try:
                if self._client is None and all(tokens):  # our own connection, closed with the backend
                    self._client = self._loop.call(
                        modal.Client.from_credentials.aio(*tokens), self.options.connect_timeout
                    )
                lookup = modal.App.lookup.aio(self.options.app, create_if_missing=True, client=self._client)
                app = self._loop.call(lookup, self.options.connect_timeout)
            except SDKTimeout:
                raise BackendError(
                    f"Modal did not answer within {self.options.connect_timeout:g} s (modal.connect_timeout) "
                    f"at {server}: "
                    "check the network, or MODAL_SERVER_URL"
                ) from None
            except Exception as exc:
                raise BackendError(f"Modal refused the request at {server}: {_reason(exc)}") from None
            image = (
                modal.Image.from_id(self.image)
                if self.image.startswith("im-")
                else modal.Image.from_registry(self.image)
            )
            create = modal.Sandbox.create.aio(
                *IDLE_COMMAND,
                app=app,
                image=image,
                timeout=self.options.timeout,
                idle_timeout=self.options.idle_timeout or None,
                workdir=self._cwd,
                cpu=self.options.cpu,
                memory=self.options.memory,
                block_network=self.options.block_network,
                client=self._client,
            )
            try:
                self._sandbox = self._loop.call(create, SANDBOX_CREATE_TIMEOUT)
            except Exception as exc:
                raise BackendError(f"could not create a Modal sandbox from {self.image!r}: {_reason(exc)}") from None
            self.sandbox_id = str(getattr(self._sandbox, "object_id", "") or "sandbox")
            self._sandbox_started(self.sandbox_id)
        return self.sandbox_id

    def _call(self, coro: Any, timeout: float = CALL_TIMEOUT) -> Any:
        assert self._loop is not None
        try:
            return self._loop.call(coro, timeout)
        except SDKTimeout as exc:
            raise BackendError(f"the Modal sandbox {self.sandbox_id} did not answer: {exc}") from None

    def _start_process(self, argv: list[str], cwd: str | None) -> ModalChannel:
        assert self._loop is not None
        return ModalChannel(self._loop, self._sandbox, argv, cwd=cwd, env=self._env, grace=self._grace)

    def _sandbox_gone(self) -> str | None:
        try:
            code = self._call(self._sandbox.poll.aio(), 30)
        except Exception:
            return None  # cannot tell: report the original error
        return None if code is None else f"stopped (exit code {code}; its timeout or idle timeout may have passed)"

    def _discard_sandbox(self, *, remove: bool) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None and remove:
            if self.options.snapshot_on_close:
                try:
                    image = self._call(sandbox.snapshot_filesystem.aio(), SANDBOX_CREATE_TIMEOUT)
                    self.snapshot_image_id = str(image.object_id)
                except Exception as exc:
                    self._notes.append(f"The file-system snapshot failed: {_reason(exc)}")
            try:
                self._call(sandbox.terminate.aio())
            except Exception:
                pass  # gone already
        self.sandbox_id = ""

    def close(self) -> None:
        super().close()
        if self._client is not None:
            try:
                self._call(self._client.close.aio(), 10)
            except Exception:
                pass
            self._client = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    # -- files: sandbox.filesystem ---------------------------------------------------------

    def _fs(self) -> Any:
        with self._lock:
            self._check_open()
            self._sandbox_ready()
            return self._sandbox.filesystem

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        # A path the workspace check allowed (`pin`) is read where it led then: the SDK cannot
        # check where a path leads in the same request, and that place had no link on it.
        target = self._pinned(self._path(path)) or self._path(path)
        limit = self.settings.files.read_max_bytes if max_bytes is None else max_bytes
        # The SDK reads a whole file and cannot open one without blocking: what is read is
        # looked at first (a swap in between is left to the call's timeout), and its length after.
        info = self.stat(target)
        if info is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), target)
        check_regular(target, info.mode, info.size, limit)
        data: bytes = self._fs_call(self._fs().read_bytes.aio(target), target)
        return check_length(target, data, limit)

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._path(path)
        info = self.stat(target)
        if info is not None and info.is_dir:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
        pinned = self._pinned(target)
        temp = self._files.temp_beside(target, pinned)
        try:
            self._fs_call(self._fs().write_bytes.aio(data, temp), target)
            self._files.replace_with(target, temp, pinned)
        except BaseException:
            self._file_command(f"rm -f -- {shell_quote(temp)}")
            raise

    def stat(self, path: str) -> FileStat | None:
        target = self._path(path)
        current = target
        for _ in range(MAX_LINK_DEPTH):  # like os.stat, describe what a symlink points to
            try:
                info = self._fs_call(self._fs().stat.aio(current), current)
            except (FileNotFoundError, NotADirectoryError):
                return None
            if info.symlink_target is None or info.type.value != "symlink":
                return _file_stat(target, info)
            current = posixpath.normpath(posixpath.join(posixpath.dirname(current), info.symlink_target))
        return None

    def list_dir(self, path: str) -> list[DirEntry]:
        target = self._path(path)
        entries = []
        for info in self._fs_call(self._fs().list_files.aio(target), target):
            kind = info.type.value
            if kind == "symlink":
                pointed = self.stat(posixpath.join(target, info.name))
                entries.append(
                    DirEntry(info.name, bool(pointed and pointed.is_dir), bool(pointed and pointed.is_file), True)
                )
            else:
                entries.append(DirEntry(info.name, kind == "directory", kind == "file"))
        return entries

    def _fs_call(self, coro: Any, path: str) -> Any:
        try:
            return self._call(coro)
        except BackendError:
            raise
        except Exception as exc:
            code = _FS_ERRNO.get(type(exc).__name__)
            if code is None:
                raise BackendError(f"a file operation in the Modal sandbox failed: {_reason(exc)}") from None
            raise OSError(code, os.strerror(code), path) from None


_FS_ERRNO = {  # modal.exception names -> errno (OSError then picks FileNotFoundError etc.)
    "SandboxFilesystemNotFoundError": errno.ENOENT,
    "SandboxFilesystemIsADirectoryError": errno.EISDIR,
    "SandboxFilesystemNotADirectoryError": errno.ENOTDIR,
    "SandboxFilesystemPermissionError": errno.EACCES,
    "SandboxFilesystemPathAlreadyExistsError": errno.EEXIST,
    "SandboxFilesystemFileTooLargeError": errno.EFBIG,
    "SandboxFilesystemDirectoryNotEmptyError": errno.ENOTEMPTY,
}


def _file_stat(path: str, info: Any) -> FileStat:
    kind = info.type.value
    fmt = st_mod.S_IFDIR if kind == "directory" else st_mod.S_IFREG if kind == "file" else 0
    return FileStat(
        path=path,
        size=int(info.size),
        is_dir=kind == "directory",
        is_file=kind == "file",
        mtime=float(info.modified_time),
        mode=fmt | (int(info.mode) & 0o7777),
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}"
