"""From settings, flags and the environment to concrete provider configs, or a clear error.

API mode: explicit `api_mode`, else the provider's own protocol (`anthropic` speaks Messages),
else the base URL (api.anthropic.com or a path ending in /anthropic), else Chat Completions.
Keys: `agent.api_key` (primary provider only), else the provider's variable (OPENAI_API_KEY,
ANTHROPIC_API_KEY, OPENROUTER_API_KEY, or <PROVIDER>_API_KEY). Local servers need none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from ...config import AgentSettings
from .base import API_MODES, ApiMode, Provider, ProviderConfig


class ProviderSetupError(ValueError):
    """No usable provider: the message names what to set."""


@dataclass(frozen=True)
class KnownProvider:
    base_url: str | None  # None: the SDK's default
    key_env: str | None  # None: no key needed (local servers)
    default_model: str | None = None


KNOWN: dict[str, KnownProvider] = {
    "openai": KnownProvider(None, "OPENAI_API_KEY", "gpt-4.1"),
    "anthropic": KnownProvider(None, "ANTHROPIC_API_KEY", "claude-sonnet-4-5"),
    "openrouter": KnownProvider("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "ollama": KnownProvider("http://localhost:11434/v1", None),
    "vllm": KnownProvider("http://localhost:8000/v1", None),
    "custom": KnownProvider(None, None),
}
# Providers looked for, in this order, when none is configured.
DETECT_ORDER = ("anthropic", "openai", "openrouter")
NO_PROVIDER = (
    "no model provider configured. Set one of ANTHROPIC_API_KEY, OPENAI_API_KEY or "
    "OPENROUTER_API_KEY in the environment, or pass --provider and --model (and --base-url for a "
    "local server such as Ollama or vLLM), or set provider/model under [agent] in the config file "
    "(HERALD_AGENT_PROVIDER / HERALD_AGENT_MODEL)."
)
_FALLBACK = re.compile(r"^(?P<provider>[\w.-]+):(?P<model>.+?)(?:@(?P<url>https?://\S+))?$")


def resolve_api_mode(api_mode: str | None, provider: str | None, base_url: str | None) -> ApiMode:
    if api_mode:
        if api_mode not in API_MODES:
            raise ProviderSetupError(f"api_mode {api_mode!r} is not one of {', '.join(API_MODES)}")
        return api_mode
    if provider == "anthropic":
        return "anthropic_messages"
    if base_url:
        parsed = urlparse(base_url)
        if parsed.hostname == "api.anthropic.com" or parsed.path.rstrip("/").endswith("/anthropic"):
            return "anthropic_messages"
    return "chat_completions"


def _key(provider: str, env: Mapping[str, str]) -> str | None:
    known = KNOWN.get(provider)
    name = known.key_env if known else f"{provider.upper().replace('-', '_')}_API_KEY"
    return env.get(name) if name else None


def _build(
    provider: str,
    model: str,
    base_url: str | None,
    api_key: str | None,
    api_mode: str | None,
    agent: AgentSettings,
    env: Mapping[str, str],
) -> ProviderConfig:
    known = KNOWN.get(provider)
    base_url = base_url or (known.base_url if known else None)
    if known is None and not base_url:
        raise ProviderSetupError(
            f"unknown provider {provider!r}: pass --base-url with its OpenAI- or Anthropic-compatible "
            f"endpoint, or use one of {', '.join(KNOWN)}."
        )
    if provider == "custom" and not base_url:
        raise ProviderSetupError("provider 'custom' needs a base URL: pass --base-url or set agent.base_url.")
    model = model or (known.default_model if known else None) or ""
    if not model:
        raise ProviderSetupError(
            f"no model for provider {provider!r}: pass --model or set agent.model (HERALD_AGENT_MODEL)."
        )
    api_key = api_key or _key(provider, env)
    needs_key = known is not None and known.key_env is not None and not (base_url and base_url != known.base_url)
    if not api_key and needs_key:
        assert known is not None and known.key_env is not None
        raise ProviderSetupError(
            f"no API key for provider {provider!r}: set {known.key_env} in the environment or "
            "api_key under [agent] in the config file."
        )
    return ProviderConfig(
        provider=provider,
        model=model,
        api_mode=resolve_api_mode(api_mode, provider, base_url),
        base_url=base_url,
        api_key=api_key,
        timeout=agent.request_timeout,
        stream=agent.stream,
        max_tokens=agent.max_tokens,
        prompt_cache=agent.prompt_cache,
    )


def resolve_primary(agent: AgentSettings, env: Mapping[str, str]) -> ProviderConfig:
    provider = agent.provider.strip().lower()
    if not provider:
        if agent.base_url:
            provider = "custom"
        else:
            found = [p for p in DETECT_ORDER if _key(p, env)]
            if not found:
                raise ProviderSetupError(NO_PROVIDER)
            provider = found[0]
    return _build(
        provider, agent.model, agent.base_url or None, agent.api_key or None, agent.api_mode or None, agent, env
    )


def parse_fallback(entry: str) -> tuple[str, str, str | None]:
    """`PROVIDER:MODEL[@BASE_URL]` -> (provider, model, base_url)."""
    match = _FALLBACK.match(entry.strip())
    if not match:
        raise ProviderSetupError(
            f"fallback entry {entry!r} is not PROVIDER:MODEL or PROVIDER:MODEL@BASE_URL "
            "(e.g. anthropic:claude-haiku-4-5 or ollama:qwen3:8b@http://localhost:11434/v1)."
        )
    return match["provider"].lower(), match["model"], match["url"]


def resolve_fallbacks(agent: AgentSettings, env: Mapping[str, str]) -> list[ProviderConfig]:
    chain = []
    for entry in agent.fallback:
        provider, model, base_url = parse_fallback(entry)
        chain.append(_build(provider, model, base_url, None, None, agent, env))
    return chain


def make_provider(config: ProviderConfig) -> Provider:
    """The provider object for `config` (typed as the Provider protocol by the caller)."""
    if config.api_mode == "anthropic_messages":
        from .anthropic_messages import AnthropicMessagesProvider

        return AnthropicMessagesProvider(config)
    from .openai_chat import OpenAIChatProvider

    return OpenAIChatProvider(config)
