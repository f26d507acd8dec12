"""Herald: a sandboxed code-execution agent built around programmatic tool calling."""

from .agent import Agent, AgentResult
from .config import Settings, load_settings
from .runtime import ExecutionResult, Runtime

__all__ = ["Agent", "AgentResult", "ExecutionResult", "Runtime", "Settings", "load_settings"]
__version__ = "0.1.0"
