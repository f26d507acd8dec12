"""Generate the demo's sample project: a small `ledger` package mid-migration.

`ledger/money.py` still has a deprecated `legacy_round()` next to its replacement
`round_money()`, and many report modules call the old one. `check.py` imports every module, runs
every report against known answers, and fails if `legacy_round` is still defined or used.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

MONEY = '''"""Money helpers."""

from decimal import ROUND_HALF_EVEN, Decimal


def round_money(value):
    """Round to cents, banker's rounding."""
    return float(Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN))


def legacy_round(value):  \n    """Deprecated: use round_money."""\t\n    return round_money(value)
'''

REPORT = '''"""Report {n}: {title}."""

from ledger.money import legacy_round

RATE = {rate}


def report(rows):
    total = 0.0
    for amount in rows:
{body}
    return legacy_round(total)
'''

TITLES = ["sales", "refunds", "fees", "payroll", "rent", "travel", "tax", "interest"]

CHECK = '''"""Import every report, check its answer, and make sure the migration is complete."""

import importlib
import pkgutil
import sys

import ledger.money
import ledger.reports

ROWS = [10.005, 20.115, 3.333, 7.5]
failures = []
for info in pkgutil.iter_modules(ledger.reports.__path__):
    module = importlib.import_module(f"ledger.reports.{{info.name}}")
    expected = EXPECTED[info.name]
    got = module.report(ROWS)
    if got != expected:
        failures.append(f"{{info.name}}: expected {{expected}}, got {{got}}")
    if "legacy_round" in vars(module):
        failures.append(f"{{info.name}} still imports legacy_round")
if hasattr(ledger.money, "legacy_round"):
    failures.append("ledger.money still defines legacy_round")
print("\\n".join(failures) or f"check passed: {{len(EXPECTED)}} reports correct, legacy_round gone")
sys.exit(1 if failures else 0)
'''


def _round_money(value: float) -> float:
    from decimal import ROUND_HALF_EVEN, Decimal

    return float(Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN))


def build(root: Path, modules: int = 40) -> Path:
    """Write the project under `root` (replacing what is there); return its directory."""
    project = root / "project"
    shutil.rmtree(project, ignore_errors=True)
    reports = project / "ledger" / "reports"
    reports.mkdir(parents=True)
    (project / "ledger" / "__init__.py").write_text("")
    (reports / "__init__.py").write_text("")
    (project / "ledger" / "money.py").write_text(MONEY)
    rows = [10.005, 20.115, 3.333, 7.5]
    expected = {}
    for n in range(modules):
        rate = round(1 + n / 100, 2)
        if n % 2:
            body = "        total += legacy_round(amount * RATE)"
            total = 0.0
            for amount in rows:
                total += _round_money(amount * rate)
        else:
            body = "        fee = legacy_round(amount * RATE / 10)\n        total += amount + fee"
            total = 0.0
            for amount in rows:
                total += amount + _round_money(amount * rate / 10)
        name = f"report_{n:02d}"
        expected[name] = _round_money(total)
        (reports / f"{name}.py").write_text(
            REPORT.format(n=n, title=TITLES[n % len(TITLES)], rate=rate, body=body)
        )
    (project / "check.py").write_text(f"EXPECTED = {expected!r}\n\n" + CHECK.format())
    return project


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else ".demo")))
