"""`python -m bench`: run every benchmark and print the tables."""

from __future__ import annotations

import os

from . import (
    agent_bench,
    browser_bench,
    browser_remote_bench,
    checkpoint_bench,
    crawl_bench,
    docker_bench,
    exec_mode_bench,
    mcp_bench,
    mcp_serve_bench,
    replay_bench,
    runtime_bench,
    scale_bench,
    ssh_bench,
    web_bench,
)
from .report import print_table


def main() -> None:
    print(f"machine: {os.cpu_count()} cores")
    print_table("Runtime core", runtime_bench.run())
    print_table("Scale: many Runtimes, many calls", scale_bench.run())
    print_table("Browser and web tools", browser_bench.run())
    print_table("Web extraction", web_bench.run())
    print_table("web_crawl", crawl_bench.run())
    print_table("Browser on a remote backend's network", browser_remote_bench.run())
    print_table("SSH backend", ssh_bench.run())
    print_table("Docker backend", docker_bench.run())
    print_table("In-backend execution (exec_mode backend)", exec_mode_bench.run())
    print_table("Workspace snapshots and checkpoints", checkpoint_bench.run())
    print_table("MCP tools", mcp_bench.run())
    print_table("MCP server over HTTP (herald mcp serve --http)", mcp_serve_bench.run())
    print_table("Record and replay", replay_bench.run())
    agent_bench.print_rows(agent_bench.run())


if __name__ == "__main__":
    main()
