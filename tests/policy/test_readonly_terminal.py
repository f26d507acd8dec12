"""The read-only terminal allow-list, parsed both ways (unit), and through a real Runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from herald.policy.shell import readonly_refusal

from .conftest import MakeRuntime, both

ALLOWED = [
    "ls",
    "ls -la src | grep '\\.py$' | wc -l",
    "cat a.txt b.txt",
    "grep -rn 'def main' . 2>/dev/null",
    "rg -n TODO --glob '*.py'",
    "find . -name '*.py' -type f",
    "find . -newer x -print",
    "git status --short",
    "git diff HEAD~1 -- src",
    "git log --oneline -n 5",
    "git --no-pager show HEAD:README.md",
    "git -C sub log",
    "git branch -a",
    "git branch --list 'feat*'",
    "git rev-parse HEAD && git ls-files",
    "head -n 5 a.txt; tail -n 5 a.txt",
    "ls >/dev/null 2>&1",
    "cat a.txt 2>&1 | head",
    "wc -l < a.txt",
    "echo '$(not a substitution)' 'and `not` either'",
    "grep 'a$' file",
    "ls # a comment",
    "cd src && ls",
    "git remote -v",
    "git remote show origin",
    "git tag",
    "git tag --list 'v1.*' --sort=-creatordate",
    # Near the refused options, but not them: quoting bash reads as plain, options that only read.
    "grep \"a$\" file",
    "echo \"costs $'5\"",
    "sort -r -- -o",
    "rg --pcre2 --pre-glob '*.gz' x",
    "git diff --output-indicator-new=+ --no-ext-diff",
    "file -k a.txt",
    "date +%s",
]

REFUSED = [
    ("rm -rf build", "`rm` is not on the read-only allow-list"),
    ("ls; rm x", "`rm`"),
    ("ls\nrm x", "`rm`"),
    ("ls && touch x", "`touch`"),
    ("ls | xargs rm", "`xargs`"),
    ("find . -delete", "find -delete"),
    ("find . -name '*.tmp' -exec rm {} ;", "find -exec"),
    ("find . -execdir rm {} +", "find -execdir"),
    ("find . -ok rm {} ;", "find -ok"),
    ("find . -fprint out.txt", "find -fprint"),
    ("git -c core.pager=sh log", "git -c"),
    ("git -ccore.pager=sh log", "git -ccore.pager=sh"),
    ("git --exec-path=/tmp/x status", "git --exec-path"),
    ("git -p log", "git -p"),
    ("git push origin main", "`git push` is not a read-only git command"),
    ("git commit -am x", "`git commit`"),
    ("git checkout -- .", "`git checkout`"),
    ("git branch newbranch", "creates a branch"),
    ("git branch -D old", "git branch -D"),
    ("git diff --output=patch.txt", "writes a file"),
    ("git log --ext-diff", "--ext-diff"),
    ("git grep -Ovim foo", "-Ovim"),
    ("ls > files.txt", "redirecting output to 'files.txt'"),
    ("cat a >> b", "redirecting output to 'b'"),
    ("ls 2> errors.log", "redirecting output to 'errors.log'"),
    ("ls &> all.log", "redirecting output"),
    ("echo $(rm -rf /)", "command substitution"),
    ("echo \"$(id)\"", "command substitution"),
    ("echo `id`", "command substitution"),
    ("cat $HOME/.ssh/id_rsa", "variable expansion"),
    ("find . $X", "variable expansion"),
    ("cat <(rm x)", "process substitution"),
    ("diff a >(tee b)", "process substitution"),
    ("sleep 100 &", "background"),
    ("(rm x)", "operator '('"),
    ("cat <<EOF", "operator '<<'"),
    ("FOO=bar ls", "`FOO=bar`"),
    ("rg --pre=./evil.sh x", "rg --pre"),
    ("sort -o out.txt in.txt", "sort -o"),
    ("date -s 2020-01-01", "date -s"),
    ("tree -o out.txt", "tree -o"),
    ("sort --compress-program=sh big.txt", "sort --compress-program"),
    ("git remote add evil https://x", "`git remote add`"),
    ("git remote -v add evil https://x", "`git remote add`"),
    ("git tag v9", "creates a tag"),
    ("git tag -l -d v1", "`git tag -d`"),
    # bash's own quoting and GNU getopt's abbreviations: what the parser read is not what bash runs.
    ("find . $'-exec' sh -c 'touch x' {} +", "$'...'"),
    ("rg $'--pre=sh' x", "$'...'"),
    ('rg $"--pre" sh x', "$'...'"),
    ("sort --o=out.txt in.txt", "sort --o=out.txt"),
    ("sort --out out.txt in.txt", "sort --out"),
    ("sort --comp=sh big.txt", "sort --comp=sh"),
    ("sort -ro out.txt in.txt", "sort -ro"),
    ("git grep --open-files-in-pag=vim foo", "--open-files-in-pag=vim"),
    ("git grep --open=vim foo", "--open=vim"),
    ("git log --out=x.txt", "--out=x.txt"),
    ("git diff --ext", "--ext"),
    ("git --exec-pa=/tmp status", "--exec-pa"),
    ("date --s=2020-01-01", "date --s=2020-01-01"),
    ("date --se 2020-01-01", "date --se"),
    ("file -kC -m magic", "file -kC"),
    ("file --comp -m magic", "file --comp"),
    ("rg --pr=sh x", "rg --pr=sh"),
    ("echo 'unterminated", "unterminated quote"),
    ("", "empty"),
    ("ls |", "empty command"),
]


@pytest.mark.parametrize("command", ALLOWED)
def test_read_only_commands_are_allowed(command: str) -> None:
    assert readonly_refusal(command) is None


@pytest.mark.parametrize(("command", "why"), REFUSED)
def test_other_commands_are_refused_with_the_reason(command: str, why: str) -> None:
    reason = readonly_refusal(command)
    assert reason is not None and why in reason, reason


def test_through_the_runtime_direct_and_script(make_runtime: MakeRuntime, workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\ntwo\n")
    runtime = make_runtime(policy="read-only")
    assert both(runtime, "terminal", {"command": "cat a.txt | wc -l"}).ok
    for command in ["find . -name a.txt -delete", "git -c core.pager=touch\\ pwned log", "cat a.txt > copy.txt",
                    "echo $(touch pwned)", "ls; touch pwned"]:
        outcome = both(runtime, "terminal", {"command": command})
        assert outcome.refused, (command, outcome)
        assert "read-only profile" in outcome.message and "--profile workspace-write" in outcome.message
        assert "allow terminal command=" in outcome.message
    assert sorted(p.name for p in workspace.iterdir()) == ["a.txt"]
