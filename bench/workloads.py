"""Scripts the benchmarks time, written once: each prints the seconds its loop took."""

from __future__ import annotations


def read_patch_verify(paths: str, old: str, new: str, *, verify: str | None = None) -> str:
    """read_file -> patch -> read_file again over the files `paths` (a Python expression for a
    list of paths, evaluated in the script), replacing `old` with `new` in each. With `verify`
    (a shell command), the loop runs in `with transaction(verify=...)`, timed with it, and the
    script first prints the seconds the transaction's start and end took (its snapshot, the
    verify command, the changes' walk)."""
    loop = (
        "for path in files:\n"
        f"    assert {old!r} in read_file(path)['content']\n"
        f"    patch(path, {old!r}, {new!r})\n"
        f"    assert {new!r} in read_file(path)['content']\n"
    )
    if verify is not None:
        inner = "".join("    " + line + "\n" for line in loop.splitlines())
        loop = (f"with transaction(verify={verify!r}) as tx:\n    began = time.perf_counter() - t\n" + inner
                + "    ending = time.perf_counter()\n"
                + "assert tx.committed, tx.reason\nprint(began + time.perf_counter() - ending)\n")
    return (
        "import time\nfrom hermes_tools import read_file, patch, transaction\n"
        f"files = {paths}\n"
        "t = time.perf_counter()\n"
        + loop
        + "print(time.perf_counter() - t)"
    )
