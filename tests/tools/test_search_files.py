"""search_files with both engines: every test runs once with ripgrep (files.search = "auto"
with rg installed) and once with the pure-Python walk, and expects the same answer."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from herald.backends.local import LocalBackend
from herald.tools import ToolError

CallTool = Callable[..., Any]  # the `call` fixture of tests/tools/conftest.py
Search = Callable[..., dict[str, Any]]

ENGINES = {"ripgrep": "auto", "python": "python"}


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    if request.param == "ripgrep" and shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed")
    name: str = request.param
    return name


def searcher(call: CallTool, engine: str) -> Search:
    def search(**args: Any) -> dict[str, Any]:
        result: dict[str, Any] = call("search_files", **args)
        assert result["engine"] == engine
        return result

    return search


@pytest.fixture
def search(make_call: Callable[..., CallTool], local_backend: LocalBackend, engine: str) -> Search:
    return searcher(make_call({"files.search": ENGINES[engine]}, backend=local_backend), engine)


def write(root: Path, files: Mapping[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


@pytest.fixture
def project(workspace: Path) -> Path:
    write(
        workspace,
        {
            "README.md": "# Demo\nTODO: write docs\n",
            "src/app.py": "import os\n\ndef main():\n    # TODO: handle errors\n    return os.getcwd()\n",
            "src/util.py": "def helper():\n    return 42  # TODO\n",
            "src/pkg/__init__.py": "",
            "src/pkg/core.py": "class Core:\n    pass\n",
            "tests/test_app.py": "from src.app import main\n\ndef test_main():\n    assert main()\n",
            "notes.txt": "nothing to do here\n",
        },
    )
    return workspace


def test_content_search_returns_path_line_and_text(search: Search, project: Path) -> None:
    result = search(pattern="TODO")
    assert result["matches"] == [
        {"path": "README.md", "line": 2, "text": "TODO: write docs"},
        {"path": "src/app.py", "line": 4, "text": "    # TODO: handle errors"},
        {"path": "src/util.py", "line": 2, "text": "    return 42  # TODO"},
    ]
    assert (result["count"], result["offset"], result["has_more"]) == (3, 0, False)
    assert "next_offset" not in result


def test_regex_patterns(search: Search, project: Path) -> None:
    result = search(pattern=r"^def \w+\(\):$")
    assert [(m["path"], m["line"]) for m in result["matches"]] == [
        ("src/app.py", 3),
        ("src/util.py", 1),
        ("tests/test_app.py", 3),
    ]


def test_no_match(search: Search, project: Path) -> None:
    result = search(pattern="no such text anywhere")
    assert result["matches"] == []
    assert (result["count"], result["has_more"]) == (0, False)


def test_file_glob_filters_files(search: Search, project: Path) -> None:
    assert [m["path"] for m in search(pattern="TODO", file_glob="*.py")["matches"]] == ["src/app.py", "src/util.py"]
    assert [m["path"] for m in search(pattern="TODO", file_glob="*.md")["matches"]] == ["README.md"]
    both = search(pattern="TODO", file_glob="*.{md,txt}")["matches"]
    assert [m["path"] for m in both] == ["README.md"]


def test_search_below_a_path_and_in_one_file(search: Search, project: Path) -> None:
    assert [m["path"] for m in search(pattern="return", path="src")["matches"]] == ["src/app.py", "src/util.py"]
    single = search(pattern="return", path="src/util.py")["matches"]
    assert single == [{"path": "src/util.py", "line": 2, "text": "    return 42  # TODO"}]


def test_paths_are_relative_to_the_shell_cwd(search: Search, call: CallTool, project: Path) -> None:
    call("terminal", command="cd src")
    result = search(pattern="TODO")
    assert [m["path"] for m in result["matches"]] == ["app.py", "util.py"]
    outside = search(pattern="TODO", path="..", file_glob="*.md")
    assert [m["path"] for m in outside["matches"]] == [str(project / "README.md")]


def test_invalid_regex_is_a_clear_error(search: Search, project: Path) -> None:
    with pytest.raises(ToolError, match=r"search_files: invalid regular expression '\(unclosed': missing \)"):
        search(pattern="(unclosed")


def test_empty_pattern_and_missing_path_are_errors(search: Search, project: Path) -> None:
    with pytest.raises(ToolError, match="pattern is empty"):
        search(pattern="")
    with pytest.raises(ToolError) as info:
        search(pattern="x", path="nowhere")
    assert info.value.error_type == "FileNotFound"
    assert "path nowhere does not exist" in str(info.value)


def test_pagination(search: Search, workspace: Path) -> None:
    write(workspace, {f"f{i:02}.txt": "needle\nhay\nneedle again\n" for i in range(10)})
    expected = [(f"f{i:02}.txt", line) for i in range(10) for line in (1, 3)]  # 20 matches
    first = search(pattern="needle", limit=8)
    assert [(m["path"], m["line"]) for m in first["matches"]] == expected[:8]
    assert (first["count"], first["offset"], first["has_more"], first["next_offset"]) == (8, 0, True, 8)
    assert "offset=8" in first["hint"]
    second = search(pattern="needle", limit=8, offset=first["next_offset"])
    assert [(m["path"], m["line"]) for m in second["matches"]] == expected[8:16]
    assert (second["has_more"], second["next_offset"]) == (True, 16)
    last = search(pattern="needle", limit=8, offset=16)
    assert [(m["path"], m["line"]) for m in last["matches"]] == expected[16:]
    assert (last["count"], last["has_more"]) == (4, False)
    assert "next_offset" not in last and "hint" not in last
    exact = search(pattern="needle", limit=20)
    assert (exact["count"], exact["has_more"]) == (20, False)
    beyond = search(pattern="needle", offset=50)
    assert (beyond["matches"], beyond["count"], beyond["has_more"]) == ([], 0, False)


def test_results_are_sorted_by_path_component_by_component(search: Search, workspace: Path) -> None:
    # ripgrep's --sort=path: a directory's entries by name, files and directories interleaved,
    # so "a/x" (in directory "a") comes before the file "a.txt" and "a-b".
    write(workspace, {name: "hit\n" for name in ("b.txt", "a.txt", "a/x", "a-b", "a b/y", "B", "_u")})
    order = ["B", "_u", "a/x", "a b/y", "a-b", "a.txt", "b.txt"]
    assert [m["path"] for m in search(pattern="hit")["matches"]] == order
    assert search(pattern="*", target="files")["files"] == order


def test_find_files_by_glob(search: Search, project: Path) -> None:
    result = search(pattern="*.py", target="files")
    assert result["files"] == [
        "src/app.py",
        "src/pkg/__init__.py",
        "src/pkg/core.py",
        "src/util.py",
        "tests/test_app.py",
    ]
    assert (result["count"], result["has_more"]) == (5, False)


def test_find_files_by_plain_substring(search: Search, project: Path) -> None:
    assert search(pattern="app", target="files")["files"] == ["src/app.py", "tests/test_app.py"]
    assert search(pattern="README", target="files")["files"] == ["README.md"]


def test_find_files_with_name_and_file_glob_needs_both(search: Search, project: Path) -> None:
    write(project, {"docs/app_notes.md": "x\n"})
    # Both filters apply: a file must match the name pattern AND file_glob.
    assert search(pattern="app", target="files", file_glob="*.py")["files"] == ["src/app.py", "tests/test_app.py"]
    assert search(pattern="app", target="files", file_glob="*.md")["files"] == ["docs/app_notes.md"]


def test_find_files_pagination(search: Search, workspace: Path) -> None:
    write(workspace, {f"m{i}.log": "" for i in range(7)})
    first = search(pattern="*.log", target="files", limit=3)
    assert first["files"] == ["m0.log", "m1.log", "m2.log"]
    assert (first["has_more"], first["next_offset"]) == (True, 3)
    rest = search(pattern="*.log", target="files", limit=3, offset=6)
    assert rest["files"] == ["m6.log"]
    assert rest["has_more"] is False


def test_hidden_and_generated_directories_are_skipped(search: Search, workspace: Path) -> None:
    write(
        workspace,
        {
            "app.js": "needle\n",
            ".hidden/secret.js": "needle\n",
            ".env": "needle\n",
            "node_modules/left-pad/index.js": "needle\n",
            "web/node_modules/x/y.js": "needle\n",
            "__pycache__/m.js": "needle\n",
            "venv/lib/site.js": "needle\n",
            "venv.js": "needle\n",  # a file named like a skipped directory is kept
        },
    )
    assert [m["path"] for m in search(pattern="needle")["matches"]] == ["app.js", "venv.js"]
    assert search(pattern="*.js", target="files")["files"] == ["app.js", "venv.js"]
    # Asked for explicitly, a skipped directory is searched.
    inside = search(pattern="needle", path="node_modules")["matches"]
    assert [m["path"] for m in inside] == ["node_modules/left-pad/index.js"]


def test_binary_files_are_skipped(search: Search, workspace: Path) -> None:
    write(workspace, {"text.txt": "needle\n", "image.bin": b"\x00\x01needle\x00\xff\n"})
    assert [m["path"] for m in search(pattern="needle")["matches"]] == ["text.txt"]


def test_symlinks_are_not_followed(search: Search, workspace: Path) -> None:
    write(workspace, {"real/file.txt": "needle\n"})
    (workspace / "link.txt").symlink_to("real/file.txt")
    (workspace / "linkdir").symlink_to("real")
    assert [m["path"] for m in search(pattern="needle")["matches"]] == ["real/file.txt"]
    assert search(pattern="*.txt", target="files")["files"] == ["real/file.txt"]


def test_crlf_and_form_feed_lines(search: Search, call: CallTool, workspace: Path) -> None:
    write(workspace, {"dos.txt": b"one\r\nneedle two\r\n", "ff.c": "a\fb\nneedle\n"})
    result = search(pattern="needle")["matches"]
    assert result == [
        {"path": "dos.txt", "line": 2, "text": "needle two"},
        {"path": "ff.c", "line": 2, "text": "needle"},
    ]
    # read_file numbers lines the same way, so a hit's line can be read back directly.
    for match in result:
        shown = call("read_file", path=match["path"], offset=match["line"], limit=1)["content"]
        assert shown == f"{match['line']:>6}|{match['text']}"


def test_long_lines_are_cut(search: Search, workspace: Path) -> None:
    write(workspace, {"min.js": "x" * 600 + "needle" + "y" * 3000 + "\n", "wide.txt": "needle " + "é" * 2000 + "\n"})
    result = search(pattern="needle")["matches"]
    assert [m["path"] for m in result] == ["min.js", "wide.txt"]
    assert result[0]["text"] == "x" * 500 + " [...]"
    assert result[1]["text"] == "needle " + "é" * 493 + " [...]"


def test_unicode_names_and_content(search: Search, workspace: Path) -> None:
    write(workspace, {"données/résumé.txt": "naïve café ☃\n", "日本/テスト.md": "café 😀\n"})
    result = search(pattern="café")["matches"]
    assert result == [
        {"path": "données/résumé.txt", "line": 1, "text": "naïve café ☃"},
        {"path": "日本/テスト.md", "line": 1, "text": "café 😀"},
    ]
    assert search(pattern="résumé", target="files")["files"] == ["données/résumé.txt"]
    assert search(pattern="*.md", target="files", path="日本")["files"] == ["日本/テスト.md"]


def test_pattern_starting_with_a_dash(search: Search, workspace: Path) -> None:
    write(workspace, {"cli.sh": "ls --all\n"})
    assert search(pattern="--all")["matches"] == [{"path": "cli.sh", "line": 1, "text": "ls --all"}]


def test_small_terminal_output_cap_does_not_lose_results(
    make_call: Callable[..., CallTool], workspace: Path, engine: str
) -> None:
    # ripgrep's output comes back through the shell, whose output is capped: a cap smaller
    # than the results must not silently drop or mangle matches.
    call = make_call({"files.search": ENGINES[engine], "terminal.max_output_bytes": 300})
    write(workspace, {f"f{i:03}.txt": "needle here\n" for i in range(60)})
    result = call("search_files", pattern="needle", limit=50)
    assert [m["path"] for m in result["matches"]] == [f"f{i:03}.txt" for i in range(50)]
    assert (result["count"], result["has_more"]) == (50, True)
    files = call("search_files", pattern="f0", target="files", limit=80)
    assert files["files"] == [f"f{i:03}.txt" for i in range(60) if f"{i:03}".startswith("0")]
    write(workspace, {f"z/f{i:03}.txt": "needle here\n" for i in range(5)})  # filtered from a long output
    globbed = call("search_files", pattern="needle", file_glob="z/*.txt", limit=3, offset=1)
    assert ([m["path"] for m in globbed["matches"]], globbed["has_more"]) == (
        [f"z/f{i:03}.txt" for i in (1, 2, 3)],
        True,
    )


def test_engines_agree(make_call: Callable[..., CallTool], local_backend: LocalBackend, project: Path) -> None:
    if shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed")
    write(
        project,
        {"dos.txt": b"TODO\r\n", "odd/ünï.py": "x = 'TODO'\n", "bin.dat": b"\0TODO", "node_modules/a.py": "TODO\n"},
    )
    calls: list[dict[str, Any]] = [
        {"pattern": "TODO"},
        {"pattern": "TODO", "limit": 2, "offset": 1},
        {"pattern": "t", "file_glob": "*.py"},
        {"pattern": "o", "target": "files"},
        {"pattern": "*.py", "target": "files", "limit": 3, "offset": 2},
    ]
    answers = {}
    for name, setting in ENGINES.items():
        call = make_call({"files.search": setting}, backend=local_backend)
        answers[name] = [{k: v for k, v in call("search_files", **args).items() if k != "engine"} for args in calls]
    assert answers["ripgrep"] == answers["python"]


# -- globs: one meaning for both engines (herald/_sandbox/search/globs.py) -------------------------------

GLOB_TREE = {
    "top.py": "needle\n",
    "README.md": "needle\n",
    "notes.txt": "needle\n",
    "docs/guide.md": "needle\n",
    "lib/src/e.py": "needle\n",
    "src/a.py": "needle\n",
    "src/b.md": "needle\n",
    "src/top.py": "needle\n",
    "src/sub/c.py": "needle\n",
    "src/sub/deep/d.py": "needle\n",
    "café.txt": "needle\n",
    "cafe.txt": "needle\n",
}

GLOB_CASES = {
    # a glob with "/" is anchored at the searched directory; * and ? never cross "/"
    "src/*.py": ["src/a.py", "src/top.py"],
    "/src/*.py": ["src/a.py", "src/top.py"],
    "*/*.py": ["src/a.py", "src/top.py"],
    # ** crosses directories, and matches zero of them too
    "**/*.py": ["lib/src/e.py", "src/a.py", "src/sub/c.py", "src/sub/deep/d.py", "src/top.py", "top.py"],
    "src/**/*.py": ["src/a.py", "src/sub/c.py", "src/sub/deep/d.py", "src/top.py"],
    "src/**": ["src/a.py", "src/b.md", "src/sub/c.py", "src/sub/deep/d.py", "src/top.py"],
    "**/sub/*.py": ["src/sub/c.py"],
    # without "/": the file name, at any depth
    "*.py": ["lib/src/e.py", "src/a.py", "src/sub/c.py", "src/sub/deep/d.py", "src/top.py", "top.py"],
    "top.py": ["src/top.py", "top.py"],
    "/top.py": ["top.py"],
    # braces, classes, ? (one character, not one byte), negation
    "*.{py,md}": [
        "README.md", "docs/guide.md", "lib/src/e.py", "src/a.py", "src/b.md",
        "src/sub/c.py", "src/sub/deep/d.py", "src/top.py", "top.py",
    ],
    "{src,docs}/*.md": ["docs/guide.md", "src/b.md"],
    "[a-c].py": ["src/a.py", "src/sub/c.py"],
    "caf?.txt": ["cafe.txt", "café.txt"],
    "!*.{py,md}": ["cafe.txt", "café.txt", "notes.txt"],
}


@pytest.mark.parametrize("glob", list(GLOB_CASES))
def test_file_glob_semantics(search: Search, workspace: Path, glob: str) -> None:
    write(workspace, GLOB_TREE)
    expected = GLOB_CASES[glob]
    assert [m["path"] for m in search(pattern="needle", file_glob=glob, limit=100)["matches"]] == expected
    assert search(pattern="*", target="files", file_glob=glob, limit=100)["files"] == expected
    if set("*?[") & set(glob):  # target="files" takes the same globs as its pattern (else: a text)
        assert search(pattern=glob, target="files", limit=100)["files"] == expected


def test_file_glob_is_anchored_at_the_searched_path(search: Search, call: CallTool, workspace: Path) -> None:
    write(workspace, GLOB_TREE)
    assert [m["path"] for m in search(pattern="needle", path="src", file_glob="sub/*.py")["matches"]] == [
        "src/sub/c.py"
    ]
    assert search(pattern="*", target="files", path="src", file_glob="*.md")["files"] == ["src/b.md"]
    call("terminal", command="cd src")  # paths stay relative to the shell's cwd, globs to `path`
    assert search(pattern="*", target="files", path="sub", file_glob="deep/*.py")["files"] == ["sub/deep/d.py"]
    # A single file is matched from the directory holding it.
    assert [m["path"] for m in search(pattern="needle", path="a.py", file_glob="*.py")["matches"]] == ["a.py"]
    assert search(pattern="needle", path="a.py", file_glob="*.md")["matches"] == []


def test_file_glob_pages(search: Search, workspace: Path) -> None:
    # Many files that ripgrep's name narrowing lets through sort before the wanted ones:
    # pages must count only files the glob matches.
    write(workspace, {f"a/{i:02}.txt": "needle\n" for i in range(30)})
    write(workspace, {f"d/{i:02}.txt": "needle\n" for i in range(7)})
    expected = [f"d/{i:02}.txt" for i in range(7)]
    first = search(pattern="needle", file_glob="d/*.txt", limit=3)
    assert [m["path"] for m in first["matches"]] == expected[:3]
    assert (first["has_more"], first["next_offset"]) == (True, 3)
    last = search(pattern="needle", file_glob="d/*.txt", limit=3, offset=6)
    assert ([m["path"] for m in last["matches"]], last["has_more"]) == (expected[6:], False)
    files = search(pattern="*.txt", target="files", file_glob="d/*", limit=4, offset=4)
    assert (files["files"], files["has_more"]) == (expected[4:], False)


@pytest.mark.parametrize(
    ("glob", "why"),
    [
        ("*.{py,md", "'{' is never closed"),
        ("src/", "for everything under it write 'src/\\*\\*'"),
        ("a}b", "'}' without"),
    ],
)
def test_invalid_globs_are_clear_errors(search: Search, workspace: Path, glob: str, why: str) -> None:
    write(workspace, GLOB_TREE)
    with pytest.raises(ToolError, match=rf"file_glob '{re.escape(glob)}' is not a valid glob: .*{why}"):
        search(pattern="needle", file_glob=glob)


# -- ignore files (herald/_sandbox/search/ignorefiles.py, gitignore.py) --

IGNORED_TREE: dict[str, str | bytes] = {
    ".gitignore": "*.log\nbuild/\n/dist\n# a comment\n",
    "src/.gitignore": "!keep.log\ngenerated/\n",
    "app.py": "needle\n",
    "app.log": "needle\n",
    "keep.log": "needle\n",  # re-included only below src/
    "build/out.py": "needle\n",
    "dist/bundle.js": "needle\n",
    "src/dist/ok.js": "needle\n",  # /dist is anchored at the root
    "src/main.py": "needle\n",
    "src/debug.log": "needle\n",
    "src/keep.log": "needle\n",
    "src/build/x.py": "needle\n",  # build/ is not anchored
    "src/generated/g.py": "needle\n",
}
NOT_IGNORED = ["app.py", "src/dist/ok.js", "src/keep.log", "src/main.py"]


def test_gitignore_root_and_nested_with_negation(search: Search, workspace: Path) -> None:
    write(workspace, IGNORED_TREE)
    assert [m["path"] for m in search(pattern="needle")["matches"]] == NOT_IGNORED
    assert search(pattern="*", target="files")["files"] == NOT_IGNORED
    # A path glob (which ripgrep gets as --glob, overriding ignore files) changes nothing.
    assert search(pattern="*", target="files", file_glob="src/**")["files"] == [
        "src/dist/ok.js",
        "src/keep.log",
        "src/main.py",
    ]
    assert [m["path"] for m in search(pattern="needle", file_glob="*/*.py")["matches"]] == ["src/main.py"]


def test_gitignore_applies_without_a_git_directory_and_with_info_exclude(search: Search, workspace: Path) -> None:
    write(workspace, {"a.py": "needle\n", "b.tmp": "needle\n", "c.tmp": "needle\n", ".gitignore": "b.tmp\n"})
    assert search(pattern="*", target="files")["files"] == ["a.py", "c.tmp"]
    write(workspace, {".git/info/exclude": "*.tmp\n", ".git/HEAD": "ref: refs/heads/main\n"})
    assert search(pattern="*", target="files")["files"] == ["a.py"]


def test_file_glob_does_not_bring_back_ignored_or_hidden_files(search: Search, workspace: Path) -> None:
    # (ripgrep's own --glob would: a matching --glob overrides .gitignore and hiding.)
    write(workspace, IGNORED_TREE)
    write(workspace, {".hidden.log": "needle\n", ".env": "needle\n", ".gitignore": "*.log\n!.env\n!.hidden.log\n"})
    assert search(pattern="*", target="files", file_glob="*.log")["files"] == ["src/keep.log"]
    assert [m["path"] for m in search(pattern="needle", file_glob="**/*.log")["matches"]] == ["src/keep.log"]
    below_src = ["src/build/x.py", "src/dist/ok.js", "src/keep.log", "src/main.py"]  # not generated/, debug.log
    assert search(pattern="*", target="files", file_glob="src/**")["files"] == below_src
    assert search(pattern="*.log", target="files")["files"] == ["src/keep.log"]
    assert search(pattern="env", target="files")["files"] == []


def test_ignore_files_of_parent_directories_apply(search: Search, workspace: Path) -> None:
    write(workspace, IGNORED_TREE)
    assert search(pattern="*", target="files", path="src")["files"] == ["src/dist/ok.js", "src/keep.log", "src/main.py"]


def test_a_path_given_inside_an_ignored_directory_is_searched(search: Search, workspace: Path) -> None:
    # As with the skipped generated directories: asked for explicitly, it is searched.
    write(workspace, IGNORED_TREE)
    assert search(pattern="*", target="files", path="build")["files"] == ["build/out.py"]
    assert [m["path"] for m in search(pattern="needle", path="src/generated")["matches"]] == ["src/generated/g.py"]
    assert search(pattern="needle", path="app.log")["matches"] == [{"path": "app.log", "line": 1, "text": "needle"}]


def test_ignore_and_rgignore_files_and_the_repository_boundary(search: Search, workspace: Path) -> None:
    write(
        workspace,
        {
            ".gitignore": "*.md\n",
            ".ignore": "*.bak\n",
            "top.md": "x\n",
            "top.bak": "x\n",
            # .ignore beats .gitignore; .rgignore beats .ignore
            "r/.gitignore": "!r.txt\n",
            "r/.ignore": "*.txt\n!s.txt\n",
            "r/.rgignore": "s.txt\n",
            "r/r.txt": "x\n",
            "r/s.txt": "x\n",
            "r/t.py": "x\n",
            # a repository inside: the outer .gitignore stops at its root, .ignore does not
            "repo/.git/HEAD": "ref: refs/heads/main\n",
            "repo/doc.md": "x\n",
            "repo/old.bak": "x\n",
        },
    )
    assert search(pattern="*", target="files")["files"] == ["r/t.py", "repo/doc.md"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("!", ["a.log", "d.py", "s/b.log", "s/c.py"]),  # ripgrep reads a lone "!" as re-including everything
        ("[z-a]", ["d.py", "s/c.py"]),  # a line that cannot mean anything is skipped
        ("**/", ["d.py"]),  # every directory
        ("!*/", ["d.py", "s/c.py"]),
        ("\\ ", ["d.py", "s/c.py"]),
    ],
)
def test_odd_gitignore_lines(search: Search, workspace: Path, line: str, expected: list[str]) -> None:
    write(
        workspace, {"a.log": "x\n", "s/b.log": "x\n", "s/c.py": "x\n", "d.py": "x\n", ".gitignore": f"*.log\n{line}\n"}
    )
    assert search(pattern="*", target="files")["files"] == expected


# -- both engines, many shapes, one answer ------------------------------------------------------


def test_engines_agree_on_globs_and_ignore_files(
    make_call: Callable[..., CallTool], local_backend: LocalBackend, workspace: Path
) -> None:
    if shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed")
    write(workspace, GLOB_TREE)
    write(workspace, {f"x/{name}": content for name, content in IGNORED_TREE.items()})
    write(
        workspace, {".hid.py": "needle\n", "src/.h/q.py": "needle\n", "a,b.txt": "needle\n", "we{ird}.txt": "needle\n"}
    )
    globs = [None, *GLOB_CASES, "x/**", "**/*.log", "we\\{ird\\}.txt", "a,b.txt", "[!c]*.txt", "s*/**/d.py"]
    answers: dict[str, list[Any]] = {}
    for name, setting in ENGINES.items():
        call = make_call({"files.search": setting}, backend=local_backend)
        answers[name] = [
            call("search_files", pattern=pattern, path=path, file_glob=glob, target=target, limit=200)
            for path in (".", "src", "x", "x/build", "src/a.py", "x/app.log")
            for glob in globs
            for target, pattern in (("content", "needle"), ("files", "*"))
        ]
        for answer in answers[name]:
            assert answer.pop("engine") == ("ripgrep" if name == "ripgrep" else "python")
    assert answers["ripgrep"] == answers["python"]
