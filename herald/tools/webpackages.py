"""Which of the web tools' libraries are missing, told without importing them, and the error that
names the pip package to install (a library too old to have what Herald imports counts as missing).
"""

from __future__ import annotations

import importlib.util

from .registry import ToolError

# The keyless path's modules -> the pip package that provides each. lxml_html_clean is imported
# by justext (under trafilatura) through lxml's `lxml.html.clean` shim; pip < 23.3 drops it when it
# comes only as the extra `lxml[html_clean]`, so herald[web] names it itself.
DIRECT_PACKAGES = {
    "httpx": "httpx",
    "trafilatura": "trafilatura",
    "justext": "justext",
    "lxml_html_clean": "lxml_html_clean",
    "lxml": "lxml",
}
FIRECRAWL_PACKAGE = "firecrawl-py"


_seen_installed: set[str] = set()


def installed(module: str) -> bool:
    """Whether `module` can be imported, found without importing it. One found stays found for
    the process (each look costs a stat of every sys.path entry, and every Runtime asks); one
    missing is looked for again, so installing it helps the next session without a restart."""
    if module in _seen_installed:
        return True
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails, or a half-imported module
        found = False
    if found:
        _seen_installed.add(module)
    return found


def not_installed(modules: dict[str, str]) -> list[str]:
    """The pip packages of `modules` that are not installed, found without importing anything
    (importing trafilatura or firecrawl costs up to seconds; this runs when a session starts)."""
    return list(dict.fromkeys(package for module, package in modules.items() if not installed(module)))


def _module_of(exc: ImportError, packages: dict[str, str]) -> str | None:
    """Which of `packages`' modules an ImportError is about. lxml's shim raises an ImportError
    with no module name whose message names lxml_html_clean, so the message is read too."""
    module = (exc.name or "").split(".")[0]
    if module in packages:
        return module
    text = str(exc)
    return next((name for name in packages if name in text), None)


def needs_package(tool: str, exc: ImportError, packages: dict[str, str], extra: str, hint: str = "") -> ToolError:
    """The error for a library that is missing, or too old to have what Herald imports."""
    lines = str(exc).strip().splitlines()
    said = f"Python said: {lines[0] if lines else type(exc).__name__}"
    install = f"pip install 'herald[{extra}]' (then start Herald again){hint}"
    module = _module_of(exc, packages)
    if module is None:
        message = f"{tool} could not import a library it needs: {install}. {said}"
    elif not_installed({module: packages[module]}):
        message = f"{tool} needs the {packages[module]} package: {install}. {said}"
    else:  # installed, but without what Herald imports from it
        upgrade = install.replace("pip install", "pip install --upgrade")
        message = f"{tool} needs a newer {packages[module]}: {upgrade}. {said}"
    return ToolError(message, "MissingPackage")
