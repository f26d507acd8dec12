"""Install Herald the way a fresh machine does, with every direct dependency at the minimum version
pyproject.toml declares, and run the smoke test of every runtime extra in that install.

    python3 tests/install/lowest_deps.py [--python python3] [--cache DIR] [--rebuild]

Why each part:
- A new venv from `python -m venv`, its bundled pip NOT upgraded: old pips (< 23.3) resolve extras
  differently (no PEP 685 name normalisation), which is how `lxml[html_clean]` came to install
  without lxml_html_clean on a fresh machine while `make setup`, which upgrades pip first, hid it.
- Every direct dependency (core and every runtime extra; not `dev`) pinned `==` its declared
  `>=` minimum through a constraints file; what they need in turn resolves normally. A minimum
  that is too low for the code fails the smoke run with Herald's own message.
- The venv is cached, keyed on pyproject.toml and the interpreter, so a rerun costs seconds and
  any checkout with the same pyproject.toml (CI's fresh clone) reuses it. The smoke run puts this
  checkout first on PYTHONPATH: the code tested is the working tree's, not the copy installed
  when the venv was built.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEME = "1"  # bump when the way the venv is built changes, so cached venvs are rebuilt
DEFAULT_CACHE = Path.home() / ".cache" / "herald-tests"
NOT_RUNTIME = {"dev"}  # extras that are tools for working on Herald, not parts of it
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")


class Problem(Exception):
    """What went wrong, said so a person can act on it."""


@dataclass(frozen=True)
class Pin:
    name: str
    minimum: str
    declared: str  # the requirement as pyproject.toml writes it

    @property
    def constraint(self) -> str:
        return f"{self.name}=={self.minimum}"


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def same_version(a: str | None, b: str) -> bool:
    """7 == 7.0.0 (the release segments, trailing zeros dropped); other forms compared as written."""
    def release(version: str) -> str:
        return re.sub(r"(\.0+)+$", "", version) if re.fullmatch(r"[0-9]+(\.[0-9]+)*", version) else version
    return a is not None and release(a) == release(b)


def read_project(pyproject: Path) -> tuple[list[str], list[Pin]]:
    """(the runtime extras, a pin at its minimum for every direct dependency they and the core have)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    own = normalise(project["name"])
    extras = {k: v for k, v in project.get("optional-dependencies", {}).items() if k not in NOT_RUNTIME}
    runtime = []  # extras with a dependency of their own: `all = ["herald[...]"]` only names others
    pins: dict[str, Pin] = {}
    problems = []
    for extra, requirements in [("", project.get("dependencies", [])), *extras.items()]:
        for requirement in requirements:
            match = REQUIREMENT.match(requirement)
            if match is None:
                problems.append(f"cannot read the requirement {requirement!r}")
                continue
            name, _, spec, marker = match.groups()
            if normalise(name) == own:
                continue
            if extra and extra not in runtime:
                runtime.append(extra)
            if marker:
                problems.append(f"{requirement!r}: environment markers are not handled here; pin it by hand")
                continue
            minimum = re.search(r">=\s*([^,\s]+)", spec)
            if minimum is None:
                problems.append(f"{requirement!r} declares no minimum version (write {name}>=X.Y)")
                continue
            pin = Pin(normalise(name), minimum.group(1), requirement)
            earlier = pins.get(pin.name)
            if earlier is not None and earlier.minimum != pin.minimum:
                problems.append(f"{name} has two different minimums: {earlier.declared!r} and {requirement!r}")
            pins[pin.name] = pin
    if problems:
        raise Problem("pyproject.toml: " + "; ".join(problems))
    return runtime, sorted(pins.values(), key=lambda p: p.name)


def venv_key(pyproject: Path, python: str) -> str:
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    digest = hashlib.sha256()
    for part in (SCHEME, version, os.path.realpath(shutil.which(python) or python)):
        digest.update(part.encode() + b"\0")
    digest.update(pyproject.read_bytes())
    return digest.hexdigest()[:16]


def run_logged(argv: list[str], log: Path, what: str) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.run(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        lines = log.read_text(errors="replace").strip().splitlines()[-25:]
        raise Problem(
            f"{what} failed (exit {proc.returncode}); the end of {log}:\n" + "\n".join("    " + line for line in lines)
        )


def build_venv(venv: Path, python: str, extras: list[str], pins: list[Pin]) -> None:
    """A fresh venv holding Herald with every runtime extra and the pinned minimums."""
    for stale in venv.parent.glob("lowest-deps-*"):  # one cached venv at a time
        shutil.rmtree(stale, ignore_errors=True)
    venv.mkdir(parents=True)
    log = venv / "install.log"
    run_logged([python, "-m", "venv", str(venv)], log, "creating the venv")
    constraints = venv / "constraints.txt"
    constraints.write_text("".join(f"{pin.constraint}\n" for pin in pins))
    target = f"{ROOT}[{','.join(extras)}]"
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    pip_version = subprocess.run([*pip, "--version"], capture_output=True, text=True).stdout.split(" from ")[0]
    print(
        f"lowest-deps: installing {target} with {pip_version}"
        f" (the venv's own), pinned to: {' '.join(p.constraint for p in pins)}",
        flush=True,
    )
    build_is_ours = not (ROOT / "build").exists()  # pip builds the wheel in the tree: tidy up after it
    try:
        run_logged([*pip, "install", "--no-input", target, "-c", str(constraints)], log,
                   "installing Herald with its declared minimum versions")
    finally:
        if build_is_ours:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    check_installed(venv, pins)
    (venv / ".installed").touch()


def check_installed(venv: Path, pins: list[Pin]) -> None:
    """The pins took effect: each direct dependency is installed at exactly its minimum."""
    code = "import importlib.metadata as m, sys\nfor n in sys.argv[1:]:\n    print(n, m.version(n))"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code, *(p.name for p in pins)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise Problem(f"cannot read the installed versions: {out.stderr.strip()}")
    installed = dict(line.split() for line in out.stdout.splitlines())
    wrong = [
        f"{p.name} {installed.get(p.name)} (wanted {p.minimum})"
        for p in pins
        if not same_version(installed.get(p.name), p.minimum)
    ]
    if wrong:
        raise Problem("the minimum versions did not install: " + ", ".join(wrong))


@contextlib.contextmanager
def locked(cache: Path, mode: int) -> Iterator[None]:
    """Runs of `make test` side by side: one builds (or replaces) the venv while none uses it."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "lowest-deps.lock").open("w") as handle:
        fcntl.flock(handle, mode)
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--python", default=os.environ.get("PYTHON", "python3"), help="the interpreter the venv is made from"
    )
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help=f"where the venv is kept (default {DEFAULT_CACHE})"
    )
    parser.add_argument("--rebuild", action="store_true", help="make the venv anew even when one is cached")
    args = parser.parse_args(argv)
    started = time.monotonic()
    pyproject = ROOT / "pyproject.toml"
    try:
        extras, pins = read_project(pyproject)
        venv = args.cache / f"lowest-deps-{venv_key(pyproject, args.python)}"
        with locked(args.cache, fcntl.LOCK_EX):
            if args.rebuild or not (venv / ".installed").exists():
                shutil.rmtree(venv, ignore_errors=True)
                build_venv(venv, args.python, extras, pins)
            else:
                print(f"lowest-deps: reusing {venv} (pyproject.toml unchanged)", flush=True)
    except Problem as exc:
        print(f"lowest-deps: FAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with locked(args.cache, fcntl.LOCK_SH):
        smoke = subprocess.run([str(venv / "bin" / "python"), "-m", "tests.install.smoke"], cwd=ROOT, env=env,
                               stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    if smoke.returncode != 0:
        print(
            f"lowest-deps: FAILED in {took:.0f} s: Herald does not work with the minimum versions pyproject.toml "
            f"declares ({', '.join(p.declared for p in pins)}). "
            "Raise the minimum of (or declare) the package the failure "
            f"above names (`pip index versions NAME` lists them); the venv is {venv}.",
            file=sys.stderr,
            flush=True,
        )
        return 1
    print(f"lowest-deps: ok in {took:.0f} s (every extra works at its declared minimum versions)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
