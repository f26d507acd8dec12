"""Symlink-aware confinement on remote backends (a real sshd on 127.0.0.1, a real dockerd): the
workspace check resolves paths where they live, every link followed, so a link the script made
with `terminal` that points out of the workspace is refused, from a direct call and from a
script alike, and a link that stays inside is fine. A link changed between the check and the
tool's own file operation is caught by the operation (the backend pins what it resolved).

The attacks are an attacker script's: links to /, to /etc, to a directory beside the workspace,
dangling links (a write through one creates its target), a link to a directory in the middle
of the path, `..` inside a link's target, and a link swapped between two calls.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from herald.backends.base import Backend

from .conftest import MakeRuntime, both, direct

REMOTES = ["ssh", "docker"]


@pytest.fixture(params=REMOTES)
def remote(request: pytest.FixtureRequest) -> Iterator[tuple[Backend, dict[str, Any]]]:
    """(a remote backend, the settings overrides it needs): each kind in turn."""
    if request.param == "ssh":
        sshd = request.getfixturevalue("sshd")
        yield request.getfixturevalue("ssh_backend"), sshd.overrides()
    else:
        yield request.getfixturevalue("docker_backend"), {}


def _out(runtime: Any, command: str) -> str:
    """What `command` printed, run by the terminal tool (as an attacker script would)."""
    reply = runtime.dispatcher.call_direct("terminal", {"command": command})
    assert "error" not in reply, reply
    return str(reply["result"]["output"]).strip()


def _sh(runtime: Any, command: str) -> None:
    reply = runtime.dispatcher.call_direct("terminal", {"command": command})
    assert "error" not in reply and reply["result"]["exit_code"] == 0, reply


def _setup(make_runtime: MakeRuntime, remote: tuple[Backend, dict[str, Any]]) -> tuple[Any, str, str]:
    """A runtime on the backend, its workspace, and a directory beside it holding secret.txt."""
    backend, overrides = remote
    runtime = make_runtime(backend=backend, overrides=overrides)
    assert direct(runtime, "write_file", {"path": "inside.txt", "content": "inside\n"}).ok  # fixes the workspace
    work = backend.cwd
    outside = f"{work}-outside-{uuid.uuid4().hex[:6]}"
    _sh(runtime, f"mkdir -p {outside} && printf 'secret\\n' > {outside}/secret.txt && mkdir -p sub/d1/d2")
    return runtime, work, outside


def _refused(runtime: Any, name: str, args: dict[str, Any], leads_to: str) -> None:
    outcome = both(runtime, name, args)
    assert outcome.refused, (name, args, outcome)
    assert "outside the workspace" in outcome.message and f"leads to {leads_to}" in outcome.message, outcome.message


def test_links_out_of_the_workspace_are_refused(make_runtime: MakeRuntime, remote: Any) -> None:
    runtime, work, outside = _setup(make_runtime, remote)
    _sh(runtime, " && ".join([
        "ln -s / root", "ln -s /etc etc", f"ln -s {outside} out", f"ln -s {outside}/secret.txt secret.txt",
        f"ln -s {outside}/new.txt dangling", f"ln -s {outside}/made/new.txt dangling_deep",
        "ln -s ../out sub/up",  # a relative link in a directory, to a link out
    ]))
    for name, args, leads_to in [
        ("read_file", {"path": "root/etc/hostname"}, "/etc/hostname"),
        ("read_file", {"path": "etc/hostname"}, "/etc/hostname"),
        ("read_file", {"path": f"{work}/etc/passwd"}, "/etc/passwd"),
        ("read_file", {"path": "secret.txt"}, f"{outside}/secret.txt"),
        ("read_file", {"path": "out/secret.txt"}, f"{outside}/secret.txt"),
        ("read_file", {"path": "sub/up/secret.txt"}, f"{outside}/secret.txt"),  # a link in the middle
        ("write_file", {"path": "out/new.txt", "content": "x"}, f"{outside}/new.txt"),
        ("write_file", {"path": "root/tmp/herald-escape.txt", "content": "x"}, "/tmp/herald-escape.txt"),
        ("write_file", {"path": "secret.txt", "content": "overwritten\n"}, f"{outside}/secret.txt"),
        ("write_file", {"path": "dangling", "content": "x"}, f"{outside}/new.txt"),  # would create it
        ("write_file", {"path": "dangling_deep", "content": "x"}, f"{outside}/made/new.txt"),
        ("write_file", {"path": "dangling_deep/more.txt", "content": "x"}, f"{outside}/made/new.txt/more.txt"),
        ("patch", {"path": "secret.txt", "old_string": "secret", "new_string": "leaked"}, f"{outside}/secret.txt"),
        ("patch", {"path": "out/secret.txt", "old_string": "secret", "new_string": "leaked"}, f"{outside}/secret.txt"),
        ("search_files", {"pattern": "secret", "path": "out"}, outside),
        ("search_files", {"pattern": "root", "path": "etc"}, "/etc"),
    ]:
        _refused(runtime, name, args, leads_to)
    listing = _out(runtime, f"cat {outside}/secret.txt; ls {outside}; ls /tmp/herald-escape.txt 2>&1 || true")
    assert listing.splitlines()[:2] == ["secret", "secret.txt"], listing
    assert "No such file" in listing


def test_links_that_stay_inside_are_allowed(make_runtime: MakeRuntime, remote: Any) -> None:
    runtime, work, outside = _setup(make_runtime, remote)
    name = posixpath.basename(outside)
    _sh(runtime, " && ".join([
        "ln -s inside.txt inner.txt", "ln -s sub subl", f"ln -s {work}/sub/d1 abs",
        "ln -s sub/d1 a",  # a directory two levels down ...
        f"ln -s a/../../{name}/secret.txt sneaky",  # ... so `..` after it stays inside, physically
    ]))
    assert both(runtime, "read_file", {"path": "inner.txt"}).ok
    assert both(runtime, "patch", {"path": "inner.txt", "old_string": "inside", "new_string": "INSIDE"}).ok
    assert both(runtime, "write_file", {"path": "subl/new.txt", "content": "new\n"}).ok
    assert both(runtime, "write_file", {"path": "abs/d2/deeper.txt", "content": "deeper\n"}).ok
    assert both(runtime, "search_files", {"pattern": "new", "path": "subl"}).ok
    # `..` after a link in a path is collapsed before anything opens it, as the check does
    assert both(runtime, "read_file", {"path": "subl/../inside.txt"}).ok
    # The link's target read as written (`a/..` lexically) is the real secret beside the
    # workspace; the kernel follows `a` first, which leads inside: the write lands there.
    assert both(runtime, "write_file", {"path": "sneaky", "content": "written inside\n"}).ok
    said = _out(runtime, f"cat inside.txt sub/new.txt sub/d1/d2/deeper.txt {name}/secret.txt {outside}/secret.txt")
    assert said.splitlines() == ["INSIDE", "new", "deeper", "written inside", "secret"], said


def test_a_link_swapped_between_two_calls_is_refused(make_runtime: MakeRuntime, remote: Any) -> None:
    runtime, _, outside = _setup(make_runtime, remote)
    _sh(runtime, "mkdir -p d && printf 'inside\\n' > d/secret.txt && printf 'inside\\n' > f.txt")
    for _ in range(2):  # the second time from what the backend remembers
        assert both(runtime, "read_file", {"path": "d/secret.txt"}).ok
        assert both(runtime, "read_file", {"path": "f.txt"}).ok
        assert both(runtime, "write_file", {"path": "f.txt", "content": "inside\n"}).ok
    _sh(runtime, f"rm -r d f.txt && ln -s {outside} d && ln -s {outside}/secret.txt f.txt")
    for name, args in [
        ("read_file", {"path": "d/secret.txt"}),
        ("read_file", {"path": "f.txt"}),
        ("patch", {"path": "f.txt", "old_string": "secret", "new_string": "leaked"}),
        ("write_file", {"path": "d/secret.txt", "content": "leaked\n"}),
    ]:
        _refused(runtime, name, args, f"{outside}/secret.txt")
    assert _out(runtime, f"cat {outside}/secret.txt") == "secret"


def test_a_link_swapped_after_the_check_is_caught_by_the_operation(remote: Any) -> None:
    """The workspace check pins where it allowed a path to lead; the read or write itself checks
    that it still leads there (SSH: a REALPATH in the operation's first flight; Docker: the
    operation's own command), so a swap between the check and the operation fails."""
    backend, _ = remote
    work = backend.cwd
    outside = f"{work}-outside-{uuid.uuid4().hex[:6]}"
    backend.run(f"mkdir -p {outside} d && printf 'secret\\n' > {outside}/secret.txt && printf 'in\\n' > d/f.txt")
    for path in (f"{work}/d/f.txt", f"{work}/d/new.txt"):
        assert backend.realpath(path) == path
        backend.pin(path, path)  # as the check does when it allows a path
    backend.run(f"rm -r d && ln -s {outside} d && cp {outside}/secret.txt {outside}/f.txt")
    with pytest.raises(PermissionError, match=f"now leads to {outside}/f.txt"):
        backend.read_bytes(f"{work}/d/f.txt")
    with pytest.raises(PermissionError, match=f"now leads to {outside}/f.txt"):
        backend.write_bytes(f"{work}/d/f.txt", b"leaked\n")
    with pytest.raises(PermissionError, match=f"now leads to {outside}/new.txt"):
        backend.write_bytes(f"{work}/d/new.txt", b"leaked\n")
    listing = backend.run(f"cat {outside}/f.txt; ls -A {outside}").output.split()
    assert listing == ["secret", "f.txt", "secret.txt"], listing  # no temp file left behind either
    # Resolved and allowed anew, the path is followed where it leads now.
    assert backend.realpath(f"{work}/d/f.txt") == f"{outside}/f.txt"
    backend.pin(f"{work}/d/f.txt", f"{outside}/f.txt")
    assert backend.read_bytes(f"{work}/d/f.txt") == b"secret\n"


def test_a_refused_check_does_not_unpin_an_allowed_call(make_runtime: MakeRuntime, remote: Any) -> None:
    """A call allowed, then its link swapped out and a second call on the same path refused
    (as parallel calls of a script could interleave): the first call's operation still fails."""
    runtime, work, outside = _setup(make_runtime, remote)
    backend = remote[0]
    assert direct(runtime, "read_file", {"path": "inside.txt"}).ok  # allowed: pinned inside
    _sh(runtime, f"rm inside.txt && ln -s {outside}/secret.txt inside.txt")
    _refused(runtime, "read_file", {"path": "inside.txt"}, f"{outside}/secret.txt")
    with pytest.raises(PermissionError, match=f"now leads to {outside}/secret.txt"):
        backend.read_bytes(f"{work}/inside.txt")  # the first call's read, had it come only now
