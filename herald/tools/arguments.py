"""Check a call's arguments against the tool's JSON schema and fill in defaults.

The check itself is the sandbox package's (herald/_sandbox/toolcore/base.py), so that a backend-mode
supervisor running a tool next to the script refuses a bad call with the same words.
"""

from __future__ import annotations

from typing import Any

from .._sandbox.toolcore import base as toolcore
from .registry import Tool


def bind_arguments(tool: Tool, args: Any, *, in_script: bool = False) -> dict[str, Any]:
    refused = tool.script_refused_args if in_script else {}
    return toolcore.bind_arguments(tool.name, tool.properties, tool.required, args, refused)
