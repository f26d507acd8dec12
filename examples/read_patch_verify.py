"""Bulk read -> patch -> verify in one script: retire ledger.money.legacy_round.

Run it with `herald exec --cwd .demo/project examples/read_patch_verify.py` (`make demo` does);
its 83 calls fit the default budget of 500. Every tool call below is an RPC to Herald; only what
this script prints reaches the model.
"""

from hermes_tools import parallel, patch, read_file, search_files, terminal

# 1. Find every file that still uses the old helper.
hits = search_files(r"legacy_round", path="ledger", file_glob="*.py", limit=1000)
files = sorted({m["path"] for m in hits["matches"]} - {"ledger/money.py"})
print(f"found {hits['count']} uses of legacy_round in {len(files)} report modules")

# 2. Patch each one (import and calls), then read it back to verify nothing is left.
replaced = 0
for path in files:
    replaced += patch(path, "legacy_round", "round_money", replace_all=True)["replacements"]
leftover = [
    page["path"]
    for page in parallel([(read_file, path) for path in files])
    if "legacy_round" in page["content"]
]
print(f"patched {replaced} occurrences; files still mentioning legacy_round: {leftover or 'none'}")

# 3. Remove the deprecated helper itself (whitespace-tolerant match).
removed = patch(
    "ledger/money.py",
    'def legacy_round(value):\n    """Deprecated: use round_money."""\n    return round_money(value)\n',
    "",
)
print(f"removed legacy_round from ledger/money.py ({removed['match']} match)")

# 4. Verify by running the project's own check.
check = terminal("python3 check.py")
print(check["output"])
print("VERIFIED" if check["exit_code"] == 0 and not leftover else "FAILED")
