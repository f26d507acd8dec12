"""A script's transaction requests are calls it may forge (frames.TRANSACTION_CALL): malformed
arguments, another transaction's id, a covered directory outside the workspace (an absolute
path, `..`, a link leading out), more open at once than allowed. Each is refused with a
TransactionError and changes nothing; what the script left open is rolled back at its end.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.checkpoints.trees import read_tree
from tests.runtime._helpers import script
from tests.runtime._transactions import RuntimeFactory, seed


def test_hostile_requests_are_refused_and_change_nothing(make_runtime: RuntimeFactory, workspace: Path,
                                                         tmp_path: Path) -> None:
    before = seed(workspace)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside\n")
    (workspace / "link-out").symlink_to(outside)
    before = read_tree(workspace)
    runtime = make_runtime()
    result = runtime.execute(script("""
        import json
        from _hermes_runtime.child.client import call
        from hermes_tools import ToolError, transaction, write_file
        answers = []
        def ask(args):
            try:
                answers.append(["ok", call("@transaction", args)])
            except ToolError as exc:
                answers.append([exc.error_type, str(exc)])
        begin = {"op": "begin", "verify": None, "timeout": None}
        for args in [None, [], {"op": "commit"}, {"op": "end", "id": 3, "error": None},
                     {"op": "end", "id": "tx-1", "error": None}, dict(begin, workdir=None, timeout=-1),
                     dict(begin, workdir=None, timeout=True), dict(begin, workdir="/"),
                     dict(begin, workdir=".."), dict(begin, workdir="link-out"), dict(begin, workdir="link-out/../..")]:
            ask(args)
        opened = [transaction().__enter__() for _ in range(16)]
        try:
            transaction().__enter__()
        except ToolError as exc:
            answers.append(["17th", str(exc)])
        write_file("during.txt", "x")
        print(json.dumps(answers))
    """), timeout=60)
    assert result.status == "success", result.error
    answers = json.loads(result.output.strip().splitlines()[-1])
    kinds = [kind for kind, _ in answers]
    assert kinds[:11] == ["TransactionError"] * 11, answers
    assert answers[-1][0] == "17th" and "16 transactions are open" in answers[-1][1]
    assert "inside the workspace" in answers[7][1]
    assert (outside / "secret.txt").read_text() == "outside\n"
    # The 16 left open were rolled back when the run ended; nothing outside was touched.
    assert read_tree(workspace) == before
    assert len([n for n in result.notes if "rolled back" in n]) == 16
