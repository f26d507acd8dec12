"""The stdlib .gitignore matcher search_files walks with (herald/_sandbox/search/gitignore.py), on its
own: against ripgrep itself where it is installed (the engine whose answers the walk must give),
and against pathspec (which Herald used before) where that is installed, on the lines whose
meaning both share."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from herald._sandbox.search.gitignore import parse_line, parse_lines
from herald._sandbox.search.ripgrep import RG_FLAGS, RG_SKIP
from herald._sandbox.search.walk import OsTree, walk_files

TREE = [
    "a.log", "s/b.log", "s/c.py", "d.py", "build/x.py", "s/build/y.py", "a/b/c.txt", "a/x/b/c.txt",
    "foo", "s/foo/z.py", "foo bar.txt", "#x", "!x", "[x].txt", "x?y", "dir/sub/deep/f.md", "dir/deep/g.md",
    "b/k.txt", "s/b/m.txt",
]

LINES = [
    "*.log", "/d.py", "s/", "build/", "/build/", "a/**", "a/**/c.txt", "**/c.txt", "**/b", "a/*/b", "*/", "**",
    "!x", "\\!x", "\\#x", "#x", "foo ", "foo\\ bar.txt", "foo/", "s/*.py", "[a-c].log", "[!a].log", "[z-a]",
    "a/**/", "**/foo/", "dir/**/deep", "?.py", "s/b.log/", "\\[x\\].txt", "x\\?y", "[]a].log", "*.LOG", "a/b",
    "*.log\n!s/b.log", "s/\n!s/c.py", "*.txt\n!a/**", "**/b/\n!s/b/", "!", "*\n!*/\n!*.py", "dir/**\n!dir/deep/",
]


def _walk(root: Path) -> list[str]:
    return [p[len(str(root)) + 1 :] for p in walk_files(OsTree(1 << 20), str(root), ignore_files=True)]


@pytest.mark.parametrize("lines", LINES)
def test_the_walk_ignores_what_ripgrep_ignores(tmp_path: Path, lines: str) -> None:
    rg = shutil.which("rg")
    if rg is None:
        pytest.skip("ripgrep (rg) is not installed")
    for name in TREE:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    (tmp_path / ".gitignore").write_text(lines + "\n")
    # As search_files runs it: hidden entries and the skipped directories stay out whatever a line says.
    listed = subprocess.run(
        f"{rg} --files {RG_FLAGS} {RG_SKIP}", shell=True, cwd=tmp_path, capture_output=True, text=True, check=False
    ).stdout.splitlines()
    assert _walk(tmp_path) == listed


# (line, path, is_dir) -> ignored? Lines as git documents them, matched as the path itself.
CASES = [
    ("*.log", "a.log", False, True),
    ("*.log", "s/b.log", False, True),
    ("*.log", "s", True, False),
    ("/d.py", "d.py", False, True),
    ("/d.py", "s/d.py", False, False),
    ("build/", "build", True, True),
    ("build/", "build", False, False),
    ("build/", "s/build", True, True),
    ("a/b", "a/b", True, True),
    ("a/b", "x/a/b", True, False),
    ("a/**", "a/x", False, True),
    ("a/**", "a/x/y", True, True),
    ("a/**/c", "a/c", False, True),
    ("a/**/c", "a/x/y/c", False, True),
    ("**/c", "x/y/c", True, True),
    ("**", "anything/at/all", False, True),
    ("a*b", "a/b", False, False),  # * never crosses "/"
    ("a?b", "a/b", False, False),
    ("[!a]x", "bx", False, True),
    ("[^a]x", "ax", False, False),
    ("[]]x", "]x", False, True),
    ("\\!x", "!x", False, True),
    ("\\#x", "#x", False, True),
    ("foo\\ ", "foo ", False, True),
    ("foo   ", "foo", False, True),
    ("caf?", "café", False, True),  # one character, not one byte
]


@pytest.mark.parametrize(("line", "path", "is_dir", "ignored"), CASES)
def test_lines_as_git_documents_them(line: str, path: str, is_dir: bool, ignored: bool) -> None:
    rule = parse_line(line)
    assert rule is not None
    assert rule.matches(path, is_dir) is ignored
    assert rule.negated is False


def test_lines_that_mean_nothing_or_cannot_mean_anything() -> None:
    assert parse_lines("\n# comment\n   \n/\n[z-a]\n[unclosed\na[/]b\ntrailing\\\n!keep\n") == parse_lines("!keep\n")
    negated = parse_line("!*.py")
    assert negated is not None and negated.negated and negated.matches("x/y.py", False)
    everything = parse_line("!")  # ripgrep: a lone "!" re-includes everything
    assert everything is not None and everything.negated and everything.matches("a/b", True)


PATHSPEC_LINES = [
    "*.log", "/d.py", "s/", "build/", "a/b", "a/**/c.txt", "**/c.txt", "**/b", "a/*/b", "!x", "\\!x", "\\#x",
    "foo ", "foo\\ bar.txt", "s/*.py", "[a-c].log", "[!a].log", "?.py", "\\[x\\].txt", "x\\?y", "[]a].log",
]


@pytest.mark.parametrize("line", PATHSPEC_LINES)
def test_lines_mean_what_pathspec_made_of_them(line: str) -> None:
    pathspec = pytest.importorskip("pathspec")
    (before,) = pathspec.GitIgnoreSpec.from_lines([line]).patterns
    rule = parse_line(line)
    assert rule is not None and rule.negated == (not before.include)
    subjects = [*TREE, "s", "build", "s/build", "a", "a/b", "a/x/b", "dir/sub/deep", "foo"]
    for subject in subjects:
        for is_dir in (False, True):
            relative = subject + ("/" if is_dir else "")
            found = before.match_file(relative)
            # pathspec also matched what is below a matching directory ("ps_d" ends inside the path)
            itself = found is not None and (
                "ps_d" not in found.match.re.groupindex or found.match.end("ps_d") in (-1, len(relative))
            )
            assert rule.matches(subject, is_dir) == itself, (line, relative)


def test_the_matcher_holds_no_catastrophic_regex() -> None:
    rule = parse_line("*a*a*a*a*a*a*a*a*b")
    assert rule is not None
    assert rule.matches("a" * 30 + "b", False)
    assert re.fullmatch(rule.regex, "a" * 25) is None
