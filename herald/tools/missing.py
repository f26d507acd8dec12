"""What a model (and through it a person) is told when a tool's Python package is missing: the
pip command, naming Herald's extra that brings it (pyproject's optional dependencies)."""

from __future__ import annotations

# Modules a tool may import lazily -> what to install. Keys are top-level module names.
EXTRAS = {
    "playwright": "herald[browser]",
    "firecrawl": "herald[web]",
    "trafilatura": "herald[web]",
    "lxml_html_clean": "herald[web]",
    "lxml": "herald[web]",
    "paramiko": "herald[ssh]",
    "docker": "herald[docker]",
    "modal": "herald[modal]",
}


def missing_dependency(tool: str, exc: ImportError) -> str:
    """What to tell a model (and through it a person) when a tool's import failed."""
    module = (exc.name or "").split(".")[0]
    if not module:  # an ImportError without a module name: say what Python said
        return f"{tool} cannot run: a Python package it needs is missing or broken ({exc})."
    extra = EXTRAS.get(module)
    install = f"pip install '{extra}'" if extra else f"pip install {module}"
    if not isinstance(exc, ModuleNotFoundError):  # there, but not the version the tool needs
        return (
            f"{tool} cannot run here: the Python package '{module}' in Herald's environment could "
            f"not be imported ({exc}). Reinstall it with: {install.replace('pip install', 'pip install --upgrade')} "
            f"(then start Herald again), or do this without {tool}."
        )
    return (
        f"{tool} cannot run here: the Python package '{module}' is not installed in Herald's "
        f"environment. Install it with: {install} (then start Herald again), or do this without {tool}."
    )
