"""The sandbox directory: `hermes_tools.py` (tools/stubgen.py) and the `_hermes_runtime` package
beside it (herald/_sandbox: RPC client, protocol, helpers, bootstrap, fork server, the supervisor
of in-backend execution): in host mode a link to the process's one copy, shared_runtime_package;
a copy of its own to ship to a backend.
"""

from __future__ import annotations

import importlib.util
import py_compile
import shutil
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from ... import _sandbox
from ...tempdirs import owned_tempdir
from ...tools.registry import Tool
from ...tools.stubgen import RUNTIME_PACKAGE, render_module
from .isolation import shared_root

# How a child interpreter starts in a sandbox directory (argv[1]), in either mode.
CHILD_LOADER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    f"from {RUNTIME_PACKAGE}.child.bootstrap import main; main()"
)


def write_runtime_package(directory: Path) -> Path:
    """Copy the sandbox package (herald/_sandbox, what runs inside the sandbox) into `directory`
    as `_hermes_runtime`: every module as it is, since they import each other relatively."""
    package = directory / RUNTIME_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    home = Path(_sandbox.__file__).parent
    for source in sorted(home.rglob("*.py")):
        target = package / source.relative_to(home)
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(source, target)
    return package


_shared_packages: dict[str, Path] = {}
_shared_lock = threading.Lock()


def shared_runtime_package(root: str) -> Path:
    """This process's one copy of the sandbox package under `root` (isolation.shared_root(),
    read-only in every sandbox), for the fork server and every host-mode sandbox directory:
    copying its 40-odd files per Runtime was most of what making one cost."""
    with _shared_lock:
        package = _shared_packages.get(root)
        if package is None or not package.is_dir():
            package = _shared_packages[root] = write_runtime_package(
                Path(tempfile.mkdtemp(prefix="package-", dir=root))
            )
        return package


def write_sandbox(
    directory: Path, tools: Iterable[Tool], elsewhere: Mapping[str, str] | None = None, *, package: Path | None = None
) -> Path:
    """Write hermes_tools.py into `directory` and the `_hermes_runtime` package beside it: a
    link to `package` (shared_runtime_package) when given, else a copy (one to ship elsewhere)."""
    if package is not None:
        (directory / RUNTIME_PACKAGE).symlink_to(package, target_is_directory=True)
    else:
        write_runtime_package(directory)
    stub = directory / "hermes_tools.py"
    source = render_module(tools, elsewhere)
    stub.write_text(source, encoding="utf-8")
    _write_bytecode(stub, source)
    return stub


def make_sandbox_dir(tools: Iterable[Tool], elsewhere: Mapping[str, str] | None, *, host_mode: bool) -> str:
    """A new sandbox directory with the stubs written. Host mode: under the process's shared
    root, the one directory every isolated sandbox sees (isolation.py), the package linked;
    backend mode: a directory of its own, copied to the backend."""
    directory = tempfile.mkdtemp(prefix="sandbox-", dir=shared_root()) if host_mode else owned_tempdir("sandbox")
    try:
        write_sandbox(
            Path(directory), tools, elsewhere, package=shared_runtime_package(shared_root()) if host_mode else None
        )
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory


_bytecode: dict[str, bytes] = {}  # stub source -> its compiled file; Runtimes with the same tools share it


def _write_bytecode(stub: Path, source: str) -> None:
    """Children run with -B (they never write bytecode) but read it: compile the stubs here so
    each child (or the zygote, child/stubcache.py) does not. The file is checked against the source's
    hash, not its time, so one compilation serves every Runtime with the same tools. A child
    on another Python version ignores it and compiles."""
    cfile = Path(importlib.util.cache_from_source(str(stub)))
    compiled = _bytecode.get(source)
    if compiled is None:
        py_compile.compile(
            str(stub), cfile=str(cfile), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH
        )
        if len(_bytecode) < 64:
            _bytecode[source] = cfile.read_bytes()
        return
    cfile.parent.mkdir(exist_ok=True)
    cfile.write_bytes(compiled)
