"""Confinement a sandbox process applies to itself, first thing (stdlib, Python >= 3.8).

With `sandbox.isolation = "landlock"` (or "auto" where bwrap cannot run) Herald cannot wrap the
interpreter in namespaces, so the interpreter restricts itself before it imports or runs
anything else: a spawned child in `bootstrap.main`, the fork server in `zygote.main` (its forks
inherit the domain). Herald passes the rules in the environment; a rule set that cannot be
applied stops the process, so a run never goes ahead less confined than its result says.
"""

from __future__ import annotations

import json
import os

ENV = "HERALD_LANDLOCK"


def confine_from_environ() -> None:
    spec = os.environ.pop(ENV, None)
    if not spec:
        return
    from .landlock import restrict

    rules = json.loads(spec)
    restrict(rules["read_only"], rules["read_write"], network=bool(rules["network"]))
