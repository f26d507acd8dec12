"""The environment handed to code the model controls (sandbox children, local shells).

Policy: keep only names on a safe list (PATH, HOME, locale, terminal, temp dirs, ...), then drop
anything that looks like a secret even if it matched the safe list. Names in the explicit
`env_passthrough` setting are kept whatever they look like: passing a secret is the user's choice.

The one copy of these rules: Herald applies them to its own environment (host-mode children,
the local backend's shell), and the supervisor of in-backend execution to the backend's, with
the passthrough names Herald sends it. Part of the sandbox package (see __init__.py for its
rules: stdlib only, Python >= 3.8).
"""

from __future__ import annotations

from typing import Dict, Iterable, Mapping

SAFE_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "COLORTERM",
        "TMPDIR", "TEMP", "TMP", "TZ", "PWD", "COLUMNS", "LINES", "HOSTNAME", "EDITOR", "PAGER",
        "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE", "SOURCE_DATE_EPOCH",
        "VIRTUAL_ENV", "NO_COLOR", "FORCE_COLOR", "CI",
    }
)
SAFE_PREFIXES = ("LC_", "XDG_")
SECRET_MARKERS = (
    "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH", "BEARER",
    "DSN", "COOKIE", "SESSION", "PRIVATE", "CERT", "SIGNATURE", "_PAT", "PWD_",
)
# Set for every sandbox child, on the host or in a backend: scripts can tell where they run,
# and print UTF-8 whatever the locale.
SANDBOX_VARS = {"HERALD_SANDBOX": "1", "PYTHONIOENCODING": "utf-8"}


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def scrubbed_environ(environ: Mapping[str, str], passthrough: Iterable[str] = ()) -> Dict[str, str]:
    allowed = set(passthrough)
    kept: Dict[str, str] = {}
    for name, value in environ.items():
        if name in allowed or ((name in SAFE_NAMES or name.startswith(SAFE_PREFIXES)) and not looks_secret(name)):
            kept[name] = value
    return kept


def sandbox_environ(environ: Mapping[str, str], passthrough: Iterable[str] = ()) -> Dict[str, str]:
    """A sandbox child's environment: `environ` scrubbed, plus SANDBOX_VARS."""
    kept = scrubbed_environ(environ, passthrough)
    kept.update(SANDBOX_VARS)
    return kept
