"""Herald: a sandboxed code-execution agent built around programmatic tool calling."""

from .config import Settings, load_settings
from .runtime import ExecutionResult, Runtime

__all__ = ["ExecutionResult", "Runtime", "Settings", "load_settings"]
__version__ = "0.1.0"
