"""search_files with both engines: every test runs once with ripgrep (files.search = "auto"
with rg installed) and once with the pure-Python walk, and expects the same answer."""

from __future__ import annotations

import shutil
from collections.abc import Callable
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


def write(root: Path, files: dict[str, str | bytes]) -> None:
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


def test_engines_agree(make_call: Callable[..., CallTool], local_backend: LocalBackend, project: Path) -> None:
    if shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed")
    write(project, {"dos.txt": b"TODO\r\n", "odd/ünï.py": "x = 'TODO'\n", "bin.dat": b"\0TODO", "node_modules/a.py": "TODO\n"})
    calls = [
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
