"""Where a file tool may act, checked on the object it acts on.

Stdlib only, Python >= 3.8 (the sandbox package). A path is checked and then used, and a link
on it may change in between (a script flipping a symlink while the call waits for its lock). So
the file operations (toolcore/fileaccess.py) open the path once, ask the kernel where the opened
descriptor really is (`/proc/self/fd/N`), check that place with `Confinement.check`, and act on
that descriptor: what was checked is what is read, written or searched.

A confinement has the workspace roots (None: any place, the `full` profile or a call a rule
allowed) and the masks: Herald's own files (config, data: transcripts, sessions, spill files)
and the credential stores the script's isolation hides too (confine/bwrap.py's lists), out of reach
of file tools whatever the workspace is. A mask is lifted only below a path a setting names
explicitly: a `policy.roots` entry inside a mask (for reads and writes), Herald's read roots
(its spill files, for reads).

On the wire (a grant's "roots"): {"write": ["/dir/"], "read": [...], "masked": [...],
"unmasked": [...] (writes and reads), "unmasked_read": [...] (reads only)}, every entry a "/dir/"
prefix ("/root/.netrc/" for a file).
"""

from __future__ import annotations

import contextvars
import errno
import os
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from ..wire.grant import Roots

PROC_FD = "/proc/self/fd/%d"


class Refused(PermissionError):
    """The path leads where this call may not act; the message says where and what to do."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(errno.EACCES, message, path)
        self.message = message

    def __str__(self) -> str:
        return self.message


def prefix(path: str) -> str:
    """`path` as a "/dir/" prefix: a place is inside it when place + "/" starts with it."""
    return path if path.endswith("/") else path + "/"


def where(fd: int, path: str) -> str:
    """Where the open descriptor `fd` (opened from `path`) really is, links resolved by the kernel."""
    try:
        target = os.readlink(PROC_FD % fd)
    except OSError:
        raise Refused(path, "%s: where it leads cannot be checked here (no /proc); file tools need /proc to "
                            "confine paths." % path) from None
    if not target.startswith("/") or target.endswith(" (deleted)"):
        raise Refused(path, "%s was removed or replaced while it was opened; try again." % path)
    return target


class Confinement:
    """The places one call may read or write (see the module's docstring)."""

    __slots__ = ("masked", "read", "unmasked", "unmasked_read", "write")

    def __init__(self, write: Optional[Iterable[str]], read: Optional[Iterable[str]], masked: Iterable[str] = (),
                 unmasked: Iterable[str] = (), unmasked_read: Iterable[str] = ()) -> None:
        self.write: Optional[Tuple[str, ...]] = None if write is None else tuple(prefix(p) for p in write)
        self.read: Optional[Tuple[str, ...]] = None if read is None else tuple(prefix(p) for p in read)
        self.masked = tuple(prefix(p) for p in masked)
        self.unmasked = tuple(prefix(p) for p in unmasked)
        self.unmasked_read = self.unmasked + tuple(prefix(p) for p in unmasked_read)

    @classmethod
    def from_wire(cls, roots: Roots, extra_masks: Sequence[str] = ()) -> "Confinement":
        """A grant's "roots" (see the module's docstring), with `extra_masks` added."""
        return cls(roots.get("write"), roots.get("read"), [*roots.get("masked", ()), *extra_masks],
                   roots.get("unmasked", ()), roots.get("unmasked_read", ()))

    def wire(self) -> Roots:
        return {"write": list(self.write or ("/",)), "read": list(self.read or ("/",)), "masked": list(self.masked),
                "unmasked": list(self.unmasked),
                "unmasked_read": [p for p in self.unmasked_read if p not in self.unmasked]}

    def is_masked(self, place: str, writing: bool) -> bool:
        """Whether the real path `place` lies in a mask this call cannot pass."""
        at = prefix(place)
        return bool(self.masked) and at.startswith(self.masked) and not at.startswith(
            self.unmasked if writing else self.unmasked_read)

    def refusal(self, path: str, place: str, writing: bool) -> Optional[str]:
        """Why `path`, which leads to the real path `place`, is out of this call's reach (None: it is not)."""
        if self.is_masked(place, writing):
            return masked_message(path, place)
        roots = self.write if writing else self.read
        if roots is not None and not prefix(place).startswith(roots):
            shown = path if path == place else "%s leads to %s, which is" % (path, place)
            return (
                "%s outside the workspace (%s). Use a path inside it, add a directory to policy.roots, "
                "or use --profile full (setting policy.profile)."
                % (shown, ", ".join(r.rstrip("/") or "/" for r in roots))
            )
        return None

    def check(self, path: str, place: str, writing: bool) -> None:
        """Raise Refused when `place` (where `path` really leads) is out of reach."""
        message = self.refusal(path, place, writing)
        if message is not None:
            raise Refused(path, message)


def masked_message(path: str, place: str) -> str:
    shown = path if path == place else "%s (it leads to %s)" % (path, place)
    return ("%s is Herald's own data or a credential store: file tools never touch it, whatever the "
            "workspace. Work with other files; if the user wants this one reachable, they can name it in "
            "policy.roots." % shown)


def secret_paths(home: str) -> List[str]:
    """The credential stores the script's isolation masks (confine/bwrap.py's lists), for a user whose
    home is `home`: the system's secret stores and the home's, whether they exist or not."""
    from ..confine.bwrap import HOME_SECRETS, MASKED_DIRS, MASKED_FILES

    return [*MASKED_FILES, *MASKED_DIRS, *(os.path.join(home, name) for name in HOME_SECRETS)]


# Herald's side: the confinement of the tool call running in this context, set by the policy's
# Gate when it checks the call (inside the Dispatcher's `confined_call()` scope, one per call) and
# applied by the local backend's file methods to what they open. Outside a call: none.
_call: "contextvars.ContextVar[Optional[List[Optional[Confinement]]]]" = contextvars.ContextVar(
    "herald_call_confinement", default=None)


class confined_call:
    """`with confined_call():` around one tool call: `confine` fills it, `call_confinement` reads it."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _call.set([None])

    def __exit__(self, *exc: Any) -> None:
        _call.reset(self._token)


def confine(confinement: Optional[Confinement]) -> None:
    """Set the current call's confinement (no effect outside a `confined_call` scope)."""
    holder = _call.get()
    if holder is not None:
        holder[0] = confinement


def call_confinement() -> Optional[Confinement]:
    holder = _call.get()
    return None if holder is None else holder[0]
