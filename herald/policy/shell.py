"""The read-only profile's terminal allow-list: a command line is parsed, never matched by prefix.

`readonly_refusal(command)` is None when every command of the line is on the allow-list with
harmless arguments, else the reason it is not. The line is first scanned with its quoting in mind
(command and process substitution, variable expansion and unquoted newlines are found there),
then tokenised by `shlex` in POSIX mode with the shell's operators as punctuation, then split
into commands at `|`, `||`, `&&` and `;`. Redirections may only go to /dev/null (or duplicate a
descriptor); `<` reads a file. Anything the parser does not understand is refused: a refusal
costs the model one turn, a wrong allow could change the workspace.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

# Commands that only read, each with a check of its arguments (None: any argument is fine).
ArgCheck = Callable[[list[str]], str | None]

_SEPARATORS = frozenset({"|", "||", "&&", ";", "|&"})
_OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
_VARIABLE = re.compile(r"\$[{(A-Za-z_0-9@*#?$!-]")


def _long_option(arg: str, options: tuple[str, ...]) -> bool:
    """Whether `arg` may name one of the long `options` (`--output`): GNU getopt_long and git
    take any unambiguous prefix (`--o=FILE`, `--open-files-in-pag`), with or without `=VALUE`."""
    if not arg.startswith("--") or arg == "--":
        return False
    name = arg.split("=", 1)[0]
    return any(option.startswith(name) for option in options if option.startswith("--"))


def _refuse_options(command: str, refused: tuple[str, ...], why: str, short: str = "") -> ArgCheck:
    """Refuse an argument that is one of the `refused` options: a long one or any prefix of it
    (`--pre`, `--pr=x`), a short one alone or bundled with others (`-kC` holds `-C`)."""

    def check(args: list[str]) -> str | None:
        for arg in args:
            if arg == "--":
                break
            if arg.split("=", 1)[0] in refused or _long_option(arg, refused):
                return f"`{command} {arg}` {why}"
        found = _short_flag(args, short) if short else None
        return f"`{command} {found}` {why}" if found else None

    return check


def _find(args: list[str]) -> str | None:
    for arg in args:
        if arg in ("-exec", "-execdir", "-ok", "-okdir", "-delete") or arg.startswith(("-fprint", "-fls")):
            return f"`find {arg}` runs commands, deletes or writes files"
    return None


def _short_flag(args: list[str], flags: str) -> str | None:
    """The first argument that is a bundle of short options containing one of `flags` (before
    a `--`, after which every argument is an operand)."""
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and any(f in arg[1:] for f in flags):
            return arg
    return None


_sort = _refuse_options("sort", ("--output", "--compress-program"), "writes a file or runs a program", short="o")
_date = _refuse_options("date", ("--set",), "sets the clock", short="s")
_tree = _refuse_options("tree", ("--output",), "writes a file", short="o")


_GIT_READ = frozenset({
    "status", "diff", "log", "show", "branch", "rev-parse", "ls-files", "ls-tree", "blame", "grep",
    "shortlog", "describe", "cat-file", "remote", "tag", "rev-list", "merge-base", "reflog",
})
_GIT_GLOBAL_REFUSED = ("-c", "--config-env", "--exec-path", "-p", "--paginate")
_GIT_BRANCH_LIST = frozenset({
    "-a", "--all", "-r", "--remotes", "-v", "-vv", "--verbose", "-l", "--list", "--show-current",
    "--no-color", "--color", "--contains", "--no-contains", "--merged", "--no-merged", "--sort",
    "--format", "--points-at", "--column", "--no-column", "-i", "--ignore-case",
})
_GIT_TAG_LIST = frozenset({
    "-l", "--list", "-n", "--contains", "--no-contains", "--points-at", "--sort", "--format", "--merged",
    "--no-merged", "--column", "--no-column", "-i", "--ignore-case", "--color",
})
_GIT_WRITES = ("--output", "--ext-diff", "-O", "--open-files-in-pager", "--edit-description")


def _git(args: list[str]) -> str | None:
    i = 0
    while i < len(args):  # global options before the subcommand
        arg = args[i]
        name = arg.split("=", 1)[0]
        if name in _GIT_GLOBAL_REFUSED or arg.startswith("-c") or _long_option(arg, _GIT_GLOBAL_REFUSED):
            return f"`git {arg}` can run other programs (configuration, pager or exec path)"
        if not arg.startswith("-"):
            break
        i += 2 if arg in ("-C", "--git-dir", "--work-tree", "--namespace") else 1
    if i >= len(args):
        return None  # plain `git` or `git --version`: prints help
    sub, rest = args[i], args[i + 1 :]
    if sub not in _GIT_READ:
        return f"`git {sub}` is not a read-only git command (allowed: {', '.join(sorted(_GIT_READ))})"
    listing = _GIT_LISTINGS.get(sub)
    return _git_writes(sub, rest) or (listing(rest) if listing is not None else None)


def _git_writes(sub: str, rest: list[str]) -> str | None:
    """The option of a read-only subcommand that writes a file or runs another program."""
    for arg in rest:
        if arg == "--":
            break
        if (arg.split("=", 1)[0] in _GIT_WRITES or _long_option(arg, _GIT_WRITES)
                or (sub == "grep" and arg.startswith("-O"))):
            return f"`git {sub} {arg}` writes a file or runs another program"
    return None


def _git_branch(rest: list[str]) -> str | None:
    listing = any(a in ("-l", "--list") for a in rest)
    for arg in rest:
        if arg.startswith("-") and arg.split("=", 1)[0] not in _GIT_BRANCH_LIST:
            return f"`git branch {arg}` changes branches (only listing them is read-only)"
        if not arg.startswith("-") and not listing:
            return "`git branch NAME` creates a branch (use `git branch --list PATTERN` to list)"
    return None


def _git_remote(rest: list[str]) -> str | None:
    words = [a for a in rest if a not in ("-v", "--verbose")]
    if words and words[0] not in ("show", "get-url"):
        return f"`git remote {words[0]}` changes remotes (only listing them is read-only)"
    return None


def _git_tag(rest: list[str]) -> str | None:
    for arg in rest:
        if arg.startswith("-") and arg.split("=", 1)[0] not in _GIT_TAG_LIST:
            return f"`git tag {arg}` changes tags (only listing them is read-only)"
    if any(not a.startswith("-") for a in rest) and not any(a in ("-l", "--list") for a in rest):
        return "`git tag NAME` creates a tag (use `git tag --list PATTERN` to list)"
    return None


# Subcommands that list or change: only their listing is read-only.
_GIT_LISTINGS: dict[str, ArgCheck] = {"branch": _git_branch, "remote": _git_remote, "tag": _git_tag}


ALLOWED: dict[str, ArgCheck | None] = {
    **{name: None for name in (
        "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "pwd", "echo", "stat", "file", "du",
        "df", "diff", "cmp", "cut", "tr", "basename", "dirname", "realpath", "readlink", "which", "whoami",
        "id", "uname", "true", "false", "nl", "tac", "md5sum", "sha1sum", "sha256sum", "jq", "cd", "printf",
        "column",
    )},
    "file": _refuse_options("file", ("--compile",), "writes a compiled magic file", short="C"),
    "rg": _refuse_options("rg", ("--pre",), "runs a program on every file"),
    "find": _find,
    "sort": _sort,
    "date": _date,
    "tree": _tree,
    "git": _git,
}


def _scan(command: str) -> tuple[str, str | None]:
    """The line with unquoted newlines turned into `;`, or the reason it cannot be allowed."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(command):
        ch = command[i]
        nxt = command[i + 1 : i + 2]
        if quote == "'":
            quote = "" if ch == "'" else quote
        elif ch == "\\" and nxt:
            out.append(ch + nxt)
            i += 2
            continue
        elif ch == "`" or (ch == "$" and nxt == "("):
            return "", "command substitution (`...` or $(...)) runs other commands"
        elif ch == "$" and nxt in ("'", '"') and quote != '"':
            # bash reads $'...' (ANSI-C escapes) and $"..." (translation) as words of their own:
            # a parser that does not would check other words than bash runs.
            return "", "$'...' and $\"...\" quoting is not supported here (use plain quotes)"
        elif ch == "$" and _VARIABLE.match(command, i):
            return "", "variable expansion ($NAME) could turn into any argument"
        elif quote == '"':
            quote = "" if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "<>" and nxt == "(":
            return "", "process substitution (<(...) or >(...)) runs other commands"
        elif ch in "\n\r":
            out.append(" ; ")
            i += 1
            continue
        out.append(ch)
        i += 1
    if quote:
        return "", "the command line has an unterminated quote"
    return "".join(out), None


def _tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    lexer.commenters = ""  # `#` stays a word: a comment can only hide text, never add commands
    return list(lexer)


MAX_COMMAND_CHARS = 100_000


def _parse(command: str) -> tuple[list[list[str]], str | None]:
    """The line's simple commands (words, redirections taken out), or why it cannot be allowed."""
    if len(command) > MAX_COMMAND_CHARS:
        return [], f"the command line is longer than {MAX_COMMAND_CHARS:,} characters (too long to check)"
    line, reason = _scan(command)
    if reason:
        return [], reason
    try:
        tokens = _tokens(line)
    except ValueError as exc:
        return [], f"the command line could not be parsed ({exc})"
    commands: list[list[str]] = [[]]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in _SEPARATORS:
            commands.append([])
        elif token in _OUTPUT_REDIRECTS or token == "<":
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if token == ">&" and target.isdigit():
                pass  # 2>&1: one descriptor onto another
            elif token != "<" and target != "/dev/null":
                return [], f"redirecting output to {target or 'nothing'!r} writes a file (only /dev/null is allowed)"
            i += 2
            continue
        elif token and all(c in ";&|<>()" for c in token):
            what = "runs it in the background" if token == "&" else "is not supported here"
            return [], f"the shell operator {token!r} {what}"
        else:
            commands[-1].append(token)
        i += 1
    return commands, None


def split_commands(command: str) -> list[list[str]] | None:
    """The words of each simple command of the line, or None when the line hides commands
    (substitutions, variables) or does not parse."""
    commands, reason = _parse(command)
    return None if reason else [c for c in commands if c]


def readonly_refusal(command: str) -> str | None:
    """None when `command` only reads (see the module docstring), else why it is refused."""
    commands, reason = _parse(command)
    if reason:
        return reason
    for words in commands:
        if not words:
            if len(commands) > 1:
                return "the command line has an empty command between operators"
            return "the command is empty"
        name, args = words[0], words[1:]
        if name not in ALLOWED:
            return f"`{name}` is not on the read-only allow-list"
        check = ALLOWED[name]
        refusal = check(args) if check is not None else None
        if refusal:
            return refusal
    return None


def allowed_commands() -> list[str]:
    return sorted(ALLOWED)
