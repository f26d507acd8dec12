"""The glob matcher both search_files engines use (herald/_sandbox/search/globs.py), on its own."""

from __future__ import annotations

import pytest

from herald._sandbox.search import globs
from herald._sandbox.search.globs import GlobError, compile_glob, escape, expand_braces, name_glob

PATHS = ["a.py", "src/a.py", "src/sub/b.py", "src/sub/deep/c.py", "lib/src/d.py", "src", "x.md", "src/y.md", "é.txt"]


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("*.py", ["a.py", "src/a.py", "src/sub/b.py", "src/sub/deep/c.py", "lib/src/d.py"]),
        ("src/*.py", ["src/a.py"]),
        ("/src/*.py", ["src/a.py"]),
        ("src/**/*.py", ["src/a.py", "src/sub/b.py", "src/sub/deep/c.py"]),
        ("**/src/*.py", ["src/a.py", "lib/src/d.py"]),
        ("src/**", ["src/a.py", "src/sub/b.py", "src/sub/deep/c.py", "src/y.md"]),
        ("src/sub/**/*.py", ["src/sub/b.py", "src/sub/deep/c.py"]),
        ("src*", ["src"]),  # `*` does not cross "/": only the file named src
        ("src/a**.py", ["src/a.py"]),  # `**` inside a component is `*`
        ("*.{py,md}", ["a.py", "src/a.py", "src/sub/b.py", "src/sub/deep/c.py", "lib/src/d.py", "x.md", "src/y.md"]),
        ("{src/sub,lib}/**/{b,d}.py", ["src/sub/b.py", "lib/src/d.py"]),
        (
            "*.{p{y,z},m?}",
            ["a.py", "src/a.py", "src/sub/b.py", "src/sub/deep/c.py", "lib/src/d.py", "x.md", "src/y.md"],
        ),
        ("[a-c].py", ["a.py", "src/a.py", "src/sub/b.py", "src/sub/deep/c.py"]),
        ("[!a].py", ["src/sub/b.py", "src/sub/deep/c.py", "lib/src/d.py"]),
        ("[^ab].py", ["src/sub/deep/c.py", "lib/src/d.py"]),
        ("?.txt", ["é.txt"]),  # one character, not one byte
        ("src?a.py", []),  # `?` does not match "/"
        ("src[/]a.py", []),  # nor does a class
        ("!*.py", ["src", "x.md", "src/y.md", "é.txt"]),
    ],
)
@pytest.mark.parametrize("matcher", ["regex", "nfa"])
def test_glob_matches(glob: str, expected: list[str], matcher: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if matcher == "nfa":  # what long paths get: the same answers
        monkeypatch.setattr(globs, "REGEX_BUDGET", 0)
    compiled = compile_glob(glob)
    assert [p for p in PATHS if compiled.matches(p)] == expected


def test_many_wildcards_on_a_long_name_take_linear_time() -> None:
    """A backtracking regex takes exponential time here (it held the GIL for minutes)."""
    many = compile_glob("*a*a*a*a*a*a*a*a*a*a*b")
    assert not many.matches("a" * 255) and many.matches("a" * 254 + "b")
    deep = compile_glob("**/**/**/**/*a*a*a*b")
    path = "/".join(["a" * 10] * 370)
    assert not deep.matches(path) and deep.matches(path + "/aaab")


def test_escapes_and_literal_specials() -> None:
    assert compile_glob("we\\{ird\\}.txt").matches("we{ird}.txt")
    assert compile_glob("\\*.txt").matches("*.txt") and not compile_glob("\\*.txt").matches("a.txt")
    assert compile_glob("[]x].txt").matches("].txt")  # a leading ] is a member
    assert compile_glob("a[b.txt").matches("a[b.txt")  # an unclosed [ is literal
    assert compile_glob("a,b.txt").matches("a,b.txt")  # a comma outside braces is literal
    for text in ["{a,b}", "*[x]*", "!x", "a\\b", "plain"]:
        assert compile_glob(escape(text)).matches(text)


def test_expand_braces() -> None:
    assert expand_braces("*.{py,md}") == ["*.py", "*.md"]
    assert expand_braces("{a,b{c,d}}x") == ["ax", "bcx", "bdx"]
    assert expand_braces("{a,}.py") == ["a.py", ".py"]
    assert expand_braces("\\{a,b\\}") == ["\\{a,b\\}"]
    assert expand_braces("[{]{x,y}") == ["[{]x", "[{]y"]


@pytest.mark.parametrize(
    ("glob", "why"),
    [
        ("{a,b", "'{' is never closed"),
        ("a}", "'}' without a matching '{'"),
        ("src/", "write 'src/**'"),
        ("", "empty"),
        ("!", "empty"),
        ("[z-a].py", "bad character class"),
    ],
)
def test_bad_globs(glob: str, why: str) -> None:
    with pytest.raises(GlobError, match=why.replace("*", "\\*")):
        compile_glob(glob)


@pytest.mark.parametrize(
    ("glob", "narrowing"),
    [
        ("*.py", (["*.py"], True)),
        ("*.{py,md}", (["*.py", "*.md"], True)),
        ("src/*.py", (["*.py"], False)),  # a path glob: its name part is only a superset
        ("{src,lib}/**/*.py", (["*.py"], False)),
        ("caf?.txt", (["caf*.txt"], False)),  # ripgrep's ? and classes work on bytes: widened
        ("[ab]x[!y]", (["*x*"], False)),
        ("src/**", None),
        ("!*.py", None),
        ("a,b.txt", None),  # --type-add could read the comma as a separator
    ],
)
def test_name_narrowing_for_ripgrep(glob: str, narrowing: tuple[list[str], bool] | None) -> None:
    assert compile_glob(glob).name_narrowing() == narrowing


@pytest.mark.parametrize(
    ("glob", "narrowing"),
    [
        ("src/*.py", ["/src/*.py"]),
        ("{src,lib}/**/x?.py", ["/src/**/x*.py", "/lib/**/x*.py"]),
        ("src/[ab]**", ["/src/**"]),  # ripgrep reads `***` as neither `*` nor `**`
        ("src/a ", ["/src/a*"]),  # a --glob is a .gitignore line: trailing spaces would be lost
        ("!src/*.py", None),
    ],
)
def test_path_narrowing_for_ripgrep(glob: str, narrowing: list[str] | None) -> None:
    assert compile_glob(glob).path_narrowing() == narrowing


def test_name_glob_for_target_files() -> None:
    assert name_glob("*.py") == "*.py"
    assert name_glob("app") == "*app*"
    assert compile_glob(name_glob("a{b")).matches("x/za{b.txt")  # plain text: its specials are literal
    assert compile_glob(name_glob("src/app")).matches("lib/src/app.py")  # with "/": anywhere in the path
    assert not compile_glob(name_glob("src/app")).matches("src/sub/app.py")
