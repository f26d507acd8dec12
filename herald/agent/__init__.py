"""The LLM loop around Herald's tools: providers, budget, guardrails, sessions."""

from .events import AgentEvent, AgentResult, ToolCallRecord
from .loop import Agent
from .providers.base import ProviderConfig, Usage
from .providers.resolve import ProviderSetupError
from .sessions import SessionNotFound

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentResult",
    "ProviderConfig",
    "ProviderSetupError",
    "SessionNotFound",
    "ToolCallRecord",
    "Usage",
]
