"""paramiko, imported without what Herald never uses of it.

paramiko.config imports `invoke` when it is installed (paramiko requires it), and invoke pulls in
unittest.mock and more: about a third of paramiko's import time, paid by every `herald exec` on
an SSH backend. paramiko uses invoke for one thing, `Match exec` in an ssh_config file, and Herald
reads no ssh_config files. So while paramiko is first imported here, `invoke` is hidden (paramiko
then records it as unavailable, which only that feature would report); afterwards it imports as
usual for anyone who wants it. Imported first by this package's __init__.
"""

from __future__ import annotations

import sys


def import_paramiko() -> None:
    if "paramiko" in sys.modules or "invoke" in sys.modules:
        return  # imported already (or invoke is, and costs nothing more)
    sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` raises ImportError
    try:
        import paramiko  # noqa: F401
    finally:
        if sys.modules.get("invoke", 0) is None:
            del sys.modules["invoke"]
