"""Model providers behind one internal message format: OpenAI Chat Completions and Anthropic
Messages, through their official SDKs."""

from .base import ModelRequest, ModelResponse, Provider, ProviderConfig, Usage
from .errors import ClassifiedError, FailoverReason, classify
from .resolve import ProviderSetupError, make_provider, resolve_api_mode

__all__ = [
    "ClassifiedError",
    "FailoverReason",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderConfig",
    "ProviderSetupError",
    "Usage",
    "classify",
    "make_provider",
    "resolve_api_mode",
]
