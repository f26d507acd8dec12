"""Each profile x each tool family, made directly and from a script: allowed or refused alike."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from herald.runtime.toolset import default_registry
from tests.fixtures.browsers import LocalWebApp
from tests.runtime._helpers import run_ok
from tests.tools.conftest import registered

from .conftest import MakeRuntime, both, direct

ALL_TOOLS = default_registry().names()  # named, so tools that cannot work here are offered (marked)
RO, WW, FULL = "read-only", "workspace-write", "full"

# (tool, args, profiles that refuse it). {out} is a file outside the workspace.
CASES: list[tuple[str, dict[str, Any], set[str]]] = [
    ("read_file", {"path": "inside.txt"}, set()),
    ("read_file", {"path": "{out}"}, {RO, WW}),
    ("read_file", {"path": "../outside.txt"}, {RO, WW}),
    ("search_files", {"pattern": "secret", "path": "{outdir}"}, {RO, WW}),
    ("search_files", {"pattern": "hello"}, set()),
    ("write_file", {"path": "new.txt", "content": "x"}, {RO}),
    ("write_file", {"path": "{outdir}/written.txt", "content": "x"}, {RO, WW}),
    ("patch", {"path": "inside.txt", "old_string": "hello", "new_string": "hullo"}, {RO}),
    ("terminal", {"command": "ls | wc -l"}, set()),
    ("terminal", {"command": "git status 2>/dev/null; cat inside.txt"}, set()),
    ("terminal", {"command": "touch made.txt"}, {RO}),
    ("terminal", {"command": "ls > listing.txt"}, {RO}),
    ("web_search", {"query": "doc"}, set()),
    ("web_extract", {"urls": ["https://docs.example.org/a"]}, set()),
    ("web_extract", {"urls": ["http://169.254.169.254/latest/meta-data/"]}, {RO, WW}),
    ("web_extract", {"urls": ["http://metadata.google.internal/computeMetadata/v1/"]}, {RO, WW}),
    ("web_crawl", {"url": "https://docs.example.org/a", "max_pages": 2}, set()),
    ("web_crawl", {"url": "http://169.254.169.254/latest/meta-data/"}, {RO, WW}),
    ("browser_navigate", {"url": "http://169.254.169.254/"}, {RO, WW}),
    ("browser_navigate", {"url": "file:///etc/passwd"}, {RO, WW}),
    ("browser_click", {"ref": "@e1"}, {RO}),
    ("browser_type", {"ref": "@e1", "text": "x"}, {RO}),
]
# Allowed browser calls need a browser: they are run with one below, not here.
NEEDS_BROWSER = {"browser_click", "browser_type"}


def fill(args: dict[str, Any], outdir: Path) -> dict[str, Any]:
    text = json.dumps(args).replace("{outdir}", str(outdir)).replace("{out}", str(outdir / "secret.txt"))
    filled: dict[str, Any] = json.loads(text)
    return filled


@pytest.fixture
def tree(workspace: Path, tmp_path: Path) -> Path:
    (workspace / "inside.txt").write_text("hello\n")
    outdir = tmp_path / "outside-dir"
    outdir.mkdir()
    (outdir / "secret.txt").write_text("secret\n")
    (tmp_path / "outside.txt").write_text("secret\n")
    return outdir


@pytest.mark.parametrize("profile", [RO, WW, FULL])
def test_profile_matrix_direct_and_script_alike(
    profile: str, make_runtime: MakeRuntime, web_settings: dict[str, Any], tree: Path, workspace: Path
) -> None:
    runtime = make_runtime(policy=profile, tools=ALL_TOOLS, overrides=web_settings)
    for name, args, refused_in in CASES:
        refused = profile in refused_in
        if profile == FULL and name.startswith("browser_"):
            # Not refused, so it would really browse (metadata address, file:): the gate answers.
            assert runtime.dispatcher.gate.check(registered(default_registry(), name), fill(args, tree),
                                                 runtime.dispatcher.ctx, "direct") is None
            continue
        if not refused and name in NEEDS_BROWSER:
            continue
        outcome = both(runtime, name, fill(args, tree))
        assert outcome.refused == refused, (profile, name, args, outcome)
        if refused:
            assert profile in outcome.message or "metadata" in outcome.message, outcome.message
    assert not (workspace / "made.txt").exists() or profile != RO
    assert not (workspace / "listing.txt").exists() or profile != RO
    assert (workspace / "inside.txt").read_text() == ("hello\n" if profile == RO else "hullo\n")
    assert (tree / "written.txt").exists() == (profile == FULL)


def test_symlink_out_of_the_workspace_is_outside(make_runtime: MakeRuntime, workspace: Path, tree: Path) -> None:
    (workspace / "link.txt").symlink_to(tree / "secret.txt")
    (workspace / "linkdir").symlink_to(tree)
    (workspace / "sub").mkdir()
    runtime = make_runtime()
    for name, args in [
        ("read_file", {"path": "link.txt"}),
        ("read_file", {"path": "linkdir/secret.txt"}),
        ("write_file", {"path": "linkdir/new.txt", "content": "x"}),
        ("patch", {"path": "link.txt", "old_string": "secret", "new_string": "leaked"}),
        ("search_files", {"pattern": "secret", "path": "linkdir"}),
        ("read_file", {"path": "sub/../../outside.txt"}),
        ("read_file", {"path": str(workspace / ".." / "outside.txt")}),
        ("read_file", {"path": "/etc/hostname"}),
    ]:
        outcome = both(runtime, name, args)
        assert outcome.refused, (name, args, outcome)
        assert "outside the workspace" in outcome.message and "policy.roots" in outcome.message
    assert (tree / "secret.txt").read_text() == "secret\n" and not (tree / "new.txt").exists()
    # A link that stays inside is fine, and so is an absolute path inside.
    (workspace / "inner.txt").symlink_to(workspace / "inside.txt")
    assert both(runtime, "read_file", {"path": "inner.txt"}).ok
    assert both(runtime, "read_file", {"path": str(workspace / "inside.txt")}).ok


def test_extra_roots_and_the_cwd_the_shell_moved_to(
    make_runtime: MakeRuntime, workspace: Path, tree: Path
) -> None:
    runtime = make_runtime(overrides={"policy.roots": [str(tree)]})
    assert both(runtime, "read_file", {"path": str(tree / "secret.txt")}).ok
    other = make_runtime()
    # `cd` moves the shell; relative paths are then read from there, and still confined.
    assert direct(other, "terminal", {"command": "cd .."}).ok
    outcome = both(other, "read_file", {"path": "outside.txt"})
    assert outcome.refused and os.path.dirname(str(workspace)) in outcome.message


def test_allowed_browser_calls_in_every_profile(
    chromium: str, make_runtime: MakeRuntime, web_app: LocalWebApp
) -> None:
    for profile in (RO, WW, FULL):
        runtime = make_runtime(policy=profile)
        assert both(runtime, "browser_navigate", {"url": f"{web_app.url}/form"}).ok
        result = run_ok(runtime, """
            from hermes_tools import browser_snapshot, browser_click, ToolError
            snap = browser_snapshot()["snapshot"]
            try:
                browser_click("@e1")
                print("clicked")
            except ToolError as exc:
                print(exc.error_type)
        """, timeout=120)
        assert result.output.strip() == ("PolicyRefused" if profile == RO else "clicked")





def test_a_path_swapped_for_a_link_after_a_read_is_outside(
    make_runtime: MakeRuntime, workspace: Path, tree: Path
) -> None:
    """Reads remember where a path led (ReadCache): a path that now leads elsewhere is resolved again."""
    (workspace / "d").mkdir()
    (workspace / "d" / "secret.txt").write_text("inside\n")
    (workspace / "f.txt").write_text("inside\n")
    runtime = make_runtime()
    for _ in range(2):
        assert both(runtime, "read_file", {"path": "d/secret.txt"}).ok
        assert both(runtime, "read_file", {"path": "f.txt"}).ok
    (workspace / "d" / "secret.txt").unlink()
    (workspace / "d").rmdir()
    (workspace / "d").symlink_to(tree)  # the directory is now a link out
    (workspace / "f.txt").unlink()
    (workspace / "f.txt").symlink_to(tree / "secret.txt")  # the file too
    for path in ("d/secret.txt", "f.txt"):
        outcome = both(runtime, "read_file", {"path": path})
        assert outcome.refused and str(tree / "secret.txt") in outcome.message, outcome


def test_herald_spill_files_may_be_read_not_written(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime(overrides={"sandbox.max_stdout_bytes": 1000})
    result = runtime.execute("print('x' * 5000)")
    assert result.output_spill_path is not None
    assert both(runtime, "read_file", {"path": result.output_spill_path}).ok
    outcome = both(runtime, "write_file", {"path": result.output_spill_path, "content": "forged"})
    assert outcome.refused and "Herald's own data" in outcome.message  # masked, whatever the profile


@pytest.mark.parametrize("isolation", ["auto", "landlock"])
def test_read_only_scripts_cannot_write_the_workspace_themselves(
    isolation: str, make_runtime: MakeRuntime, workspace: Path
) -> None:
    """The profile governs tools; under isolation the script's own open() is held to it too."""
    code = """
        import os
        try:
            with open("own.txt", "w") as fh:
                fh.write("x")
            print("wrote")
        except OSError as exc:
            print("refused", exc.errno)
        print(open("inside.txt").read().strip())
    """
    (workspace / "inside.txt").write_text("hello\n")
    try:
        runtime = make_runtime(policy="read-only", overrides={"sandbox.isolation": isolation})
    except Exception as exc:  # SandboxStartError: no Landlock in this kernel
        pytest.skip(f"isolation {isolation} is not available here: {exc}")
    if runtime.isolation.mode == "none":
        pytest.skip(f"no isolation here ({runtime.isolation.describe})")
    first, second = run_ok(runtime, code).output.splitlines()
    assert first.startswith("refused") and second == "hello"
    assert not (workspace / "own.txt").exists()
    writable = make_runtime(overrides={"sandbox.isolation": isolation})
    assert run_ok(writable, code).output.splitlines()[0] == "wrote"  # workspace-write: writable


def test_a_screenshot_is_written_only_inside_the_workspace(make_runtime: MakeRuntime, tree: Path) -> None:
    """browser_screenshot's `path` is a file it writes, though its locks name only the browser."""
    runtime = make_runtime(tools=ALL_TOOLS)
    outcome = direct(runtime, "browser_screenshot", {"path": str(tree / "shot.png")})
    assert outcome.refused and "outside the workspace" in outcome.message
    assert direct(make_runtime(policy=RO, tools=ALL_TOOLS), "browser_screenshot", {}).refused
