"""`python -m bench`: run every benchmark and print the tables."""

from __future__ import annotations

import os

from . import runtime_bench
from .report import print_table


def main() -> None:
    print(f"machine: {os.cpu_count()} cores")
    print_table("Runtime core", runtime_bench.run())


if __name__ == "__main__":
    main()
