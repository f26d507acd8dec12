"""API keys taken out of the environment at start.

A key in os.environ is inherited by every process Herald starts that is not given a scrubbed
environment (a library's helper, a backend's CLI) and stays readable there. The command line
therefore moves every `*_API_KEY` variable out of os.environ as it starts
(`take_api_keys`); Herald's own readers look them up through `herald_environ()`, which sees
the environment plus the keys taken.
"""

from __future__ import annotations

import os
from collections import ChainMap
from collections.abc import Mapping

_taken: dict[str, str] = {}


def take_api_keys() -> list[str]:
    """Move every `*_API_KEY` variable from os.environ to Herald's private store; their names."""
    names = [name for name in os.environ if name.upper().endswith("_API_KEY")]
    for name in names:
        _taken[name] = os.environ.pop(name)
    return names


def herald_environ() -> Mapping[str, str]:
    """Herald's view of its environment: os.environ plus the keys `take_api_keys` removed."""
    return ChainMap(os.environ, _taken)
