"""Everything execute_code needs: the sandbox child, the RPC link and the dispatcher."""

from .runtime import Runtime
from .sandbox.result import ExecutionResult

__all__ = ["ExecutionResult", "Runtime"]
