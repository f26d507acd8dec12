"""The three scripted tasks of the agent benchmark: a workspace to set up, a check of the result,
and two scripted models per task — one that uses execute_code, one limited to direct tool calls
(one call per turn when the next call depends on the last result, up to BATCH independent calls
in one turn otherwise)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakes.llm_server import RecordedRequest, Turn, call, calls, reply

BATCH = 10  # independent direct calls a direct-only model puts in one turn
Strategy = Callable[[RecordedRequest], Turn]


def _last_json(request: RecordedRequest) -> list[Any]:
    return [json.loads(text) for _, text in request.tool_results()]


def _script_output(request: RecordedRequest) -> str:
    return str(_last_json(request)[0]["output"])


# -- task 1: bulk patch of 200 files ----------------------------------------------------------------

FILES = 200


def setup_bulk(root: Path) -> None:
    (root / "ledger").mkdir()
    for i in range(FILES):
        (root / "ledger" / f"account_{i:03d}.py").write_text(
            f'"""Account {i}."""\n\nfrom .money import legacy_round\n\n\ndef total_{i}(values):\n'
            f"    subtotal = sum(values) * {i + 1}\n    return legacy_round(subtotal)\n"
        )
    (root / "check.py").write_text(
        "import pathlib, sys\n"
        "left = [p.name for p in pathlib.Path('ledger').glob('*.py') if 'legacy_round' in p.read_text()]\n"
        "print('legacy_round left in', len(left), 'files')\nsys.exit(1 if left else 0)\n"
    )


BULK_SCRIPT = """
from hermes_tools import search_files, patch, terminal
hits = search_files("legacy_round", path="ledger", file_glob="*.py", limit=1000)
files = sorted({m["path"] for m in hits["matches"]})
for path in files:
    patch(path, "legacy_round", "round_money", replace_all=True)
print(len(files), "files patched;", terminal("python3 check.py")["output"].strip())
"""


def verify_bulk(root: Path, answer: str) -> bool:
    texts = [p.read_text() for p in (root / "ledger").glob("*.py")]
    return len(texts) == FILES and all("round_money(subtotal)" in t and "legacy_round" not in t for t in texts)


def bulk_code_model() -> Strategy:
    def model(request: RecordedRequest) -> Turn:
        if not request.tool_results():
            return calls(call("execute_code", code=BULK_SCRIPT))
        return reply(f"Done: {_script_output(request).strip()}.")

    return model


def bulk_direct_model() -> Strategy:
    state: dict[str, Any] = {"phase": "search"}

    def model(request: RecordedRequest) -> Turn:
        results = _last_json(request) if request.tool_results() else []
        if state["phase"] == "search":
            state["phase"] = "read"
            return calls(call("search_files", pattern="legacy_round", path="ledger", file_glob="*.py", limit=1000))
        if state["phase"] == "read" and "todo" not in state:
            state["todo"] = sorted({m["path"] for m in results[0]["matches"]})
            state["queue"] = list(state["todo"])
        if state["phase"] == "read":  # look at each file before editing it
            batch, state["queue"] = state["queue"][:BATCH], state["queue"][BATCH:]
            if not state["queue"]:
                state["phase"], state["queue"] = "patch", list(state["todo"])
            return calls(*[call("read_file", path=p) for p in batch])
        if state["phase"] == "patch":
            batch, state["queue"] = state["queue"][:BATCH], state["queue"][BATCH:]
            if not state["queue"]:
                state["phase"] = "check"
            return calls(*[call("patch", path=p, old_string="legacy_round", new_string="round_money", replace_all=True)
                           for p in batch])
        if state["phase"] == "check":
            state["phase"] = "answer"
            return calls(call("terminal", command="python3 check.py"))
        return reply(f"Done: {results[0]['output'].strip()}.")

    return model


# -- task 2: reading and cross-referencing 10 local pages --------------------------------------------

PAGES = 10
CODENAMES = ["Falcon", "Heron", "Osprey"]


def setup_pages(root: Path) -> None:
    pages = root / "pages"
    pages.mkdir()
    filler = " ".join(f"Paragraph text about the quarterly plan, line {n}." for n in range(70))
    for i in range(PAGES + 1):
        name = "index.md" if i == 0 else f"page_{i:02d}.md"
        mentions = [CODENAMES[j] for j in range(3) if i and (i + j) % 3 == 0]
        body = [f"# {name}", filler, *[f"This page discusses Project {m}." for m in mentions], filler]
        if i < PAGES:
            body.append(f"Next: see page_{i + 1:02d}.md")
        (pages / name).write_text("\n\n".join(body) + "\n")


def expected_crossref() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {m: [] for m in CODENAMES}
    for i in range(1, PAGES + 1):
        for j in range(3):
            if (i + j) % 3 == 0:
                out[CODENAMES[j]].append(f"page_{i:02d}.md")
    return out


PAGES_SCRIPT = """
import re
from hermes_tools import read_file
page, seen, mentions = "index.md", [], {}
while page:
    text = read_file("pages/" + page, limit=2000)["content"]
    seen.append(page)
    for name in re.findall(r"Project (\\w+)", text):
        mentions.setdefault(name, []).append(page)
    link = re.search(r"Next: see (page_\\d+\\.md)", text)
    page = link.group(1) if link else None
print("pages read:", len(seen))
for name in sorted(mentions):
    print(name, "->", ", ".join(mentions[name]))
"""


def _answer(mentions: dict[str, list[str]]) -> str:
    return "; ".join(f"{name}: {', '.join(pages)}" for name, pages in sorted(mentions.items()))


def verify_pages(root: Path, answer: str) -> bool:
    return answer == _answer(expected_crossref())


def pages_code_model() -> Strategy:
    def model(request: RecordedRequest) -> Turn:
        if not request.tool_results():
            return calls(call("execute_code", code=PAGES_SCRIPT))
        lines = _script_output(request).splitlines()[1:]
        return reply(_answer({a: b.split(", ") for a, b in (line.split(" -> ") for line in lines)}))

    return model


def pages_direct_model() -> Strategy:
    mentions: dict[str, list[str]] = {}

    def model(request: RecordedRequest) -> Turn:
        if not request.tool_results():
            return calls(call("read_file", path="pages/index.md", limit=2000))
        page = _last_json(request)[0]
        name = page["path"].rsplit("/", 1)[-1]
        for codename in re.findall(r"Project (\w+)", page["content"]):
            mentions.setdefault(codename, []).append(name)
        link = re.search(r"Next: see (page_\d+\.md)", page["content"])
        if link:  # the next page is only known once this one is read
            return calls(call("read_file", path=f"pages/{link.group(1)}", limit=2000))
        return reply(_answer(mentions))

    return model


# -- task 3: paging through 20 result pages ---------------------------------------------------------

OWNERS = ["ana", "bo", "cy", "dee", "eli"]
TODOS = 500
PAGE_SIZE = 25  # 20 pages of results


def setup_todos(root: Path) -> None:
    (root / "src").mkdir()
    for f in range(100):
        lines = [
            f"def handler_{f}_{k}():\n    # TODO({OWNERS[(f * 5 + k) % 5]}): handle case {k}\n    pass\n"
            for k in range(5)
        ]
        (root / "src" / f"mod_{f:03d}.py").write_text("\n".join(lines))


def expected_counts() -> str:
    counts = dict.fromkeys(OWNERS, 0)
    for f in range(100):
        for k in range(5):
            counts[OWNERS[(f * 5 + k) % 5]] += 1
    return ", ".join(f"{o}={n}" for o, n in sorted(counts.items()))


TODO_SCRIPT = f"""
import re
from collections import Counter
from hermes_tools import search_files
counts, offset, pages = Counter(), 0, 0
while offset is not None:
    page = search_files(r"TODO\\(\\w+\\)", path="src", limit={PAGE_SIZE}, offset=offset)
    pages += 1
    counts.update(re.search(r"TODO\\((\\w+)\\)", m["text"]).group(1) for m in page["matches"])
    offset = page.get("next_offset")
print("pages:", pages)
print(", ".join(f"{{o}}={{n}}" for o, n in sorted(counts.items())))
"""


def verify_todos(root: Path, answer: str) -> bool:
    return answer == expected_counts()


def todos_code_model() -> Strategy:
    def model(request: RecordedRequest) -> Turn:
        if not request.tool_results():
            return calls(call("execute_code", code=TODO_SCRIPT))
        return reply(_script_output(request).splitlines()[-1])

    return model


def todos_direct_model() -> Strategy:
    counts: dict[str, int] = {}

    def search(offset: int) -> Turn:
        return calls(call("search_files", pattern=r"TODO\(\w+\)", path="src", limit=PAGE_SIZE, offset=offset))

    def model(request: RecordedRequest) -> Turn:
        if not request.tool_results():
            return search(0)
        page = _last_json(request)[0]
        for match in page["matches"]:
            owner = re.search(r"TODO\((\w+)\)", match["text"])
            if owner:
                counts[owner.group(1)] = counts.get(owner.group(1), 0) + 1
        if page.get("next_offset") is not None:  # each page says where the next one starts
            return search(page["next_offset"])
        return reply(", ".join(f"{o}={n}" for o, n in sorted(counts.items())))

    return model


@dataclass
class Task:
    name: str
    prompt: str
    setup: Callable[[Path], None]
    verify: Callable[[Path, str], bool]
    code_model: Callable[[], Strategy]
    direct_model: Callable[[], Strategy]


TASKS = [
    Task(
        "bulk patch of 200 files",
        "Replace legacy_round with round_money in ledger/ and verify with check.py.",
        setup_bulk,
        verify_bulk,
        bulk_code_model,
        bulk_direct_model,
    ),
    Task(
        "cross-reference 10 local pages",
        "Starting at pages/index.md, follow the Next links and list which pages mention each project.",
        setup_pages,
        verify_pages,
        pages_code_model,
        pages_direct_model,
    ),
    Task(
        "page through 20 result pages",
        "Count the TODO(owner) comments in src/ per owner.",
        setup_todos,
        verify_todos,
        todos_code_model,
        todos_direct_model,
    ),
]
