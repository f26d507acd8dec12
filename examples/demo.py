"""`herald demo` / `make demo`: generate the sample project and run the bulk-edit script on it."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from sample_project import build

from herald import Runtime, load_settings
from herald.backends.local import LocalBackend

HERE = Path(__file__).resolve().parent


def main(root: Path) -> int:
    console = Console(highlight=False)
    project = build(root)
    script = (HERE / "read_patch_verify.py").read_text()
    console.print(f"[bold]Sample project[/] {project} — 40 report modules call the deprecated legacy_round()")
    console.print(
        f"[bold]Script[/] examples/read_patch_verify.py ({len(script.splitlines())} lines), one execute_code run\n"
    )
    settings = load_settings()
    with LocalBackend(str(project), settings=settings) as backend, Runtime(backend, settings=settings) as runtime:
        result = runtime.execute(script)  # 83 calls, within the default budget
    console.print(Panel(result.output.rstrip() or "(no output)", title="what the model sees", expand=False))
    if result.error:
        console.print(result.error, style="red")
    console.print(
        f"status [bold]{result.status}[/] · {result.tool_calls_made} tool calls in one script · "
        f"{result.duration_seconds:.2f} s · transcript: {runtime.transcript.path if runtime.transcript else '-'}"
    )
    ok = result.ok and "VERIFIED" in result.output
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".demo")))
