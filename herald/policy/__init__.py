"""Policy at dispatch: permission profiles, per-tool rules, path confinement and the read-only
terminal allow-list. One `Gate` per session checks every tool call the same way, whether the
model makes it directly or a script makes it over RPC (herald/runtime/dispatcher.py)."""

from .policy import (
    FULL,
    PROFILES,
    READ_ONLY,
    WORKSPACE_WRITE,
    Approver,
    Gate,
    Policy,
    PolicyCall,
    Verdict,
)
from .rules import Rule, RuleError, parse_rule

__all__ = [
    "FULL", "PROFILES", "READ_ONLY", "WORKSPACE_WRITE", "Approver", "Gate", "Policy", "PolicyCall", "Rule",
    "RuleError", "Verdict", "parse_rule",
]
