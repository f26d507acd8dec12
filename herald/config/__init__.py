"""Herald's one settings object: defaults < config file < environment < explicit overrides.

The config file is TOML (`$HERALD_CONFIG`, else `~/.config/herald/config.toml`), with one table per
section below. Every field can also be set from the environment as `HERALD_<SECTION>_<FIELD>`
(e.g. `HERALD_SANDBOX_TIMEOUT=60`); top-level fields as `HERALD_<FIELD>` (e.g. `HERALD_DATA_DIR`).
Unknown keys and badly typed values are errors that name the key and where it came from.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .coerce import SEARCH_PROVIDERS, coerce
from .errors import ConfigError
from .mcp_servers import McpServerSettings, parse_mcp_servers

__all__ = [
    "SEARCH_PROVIDERS", "CheckpointsSettings", "ConfigError", "McpServerSettings", "ServeSettings", "Settings",
    "default_config_path", "load_settings", "parse_mcp_servers",
]



@dataclass
class SandboxSettings:
    timeout: float = 300.0
    max_tool_calls: int = (
        500  # README's loops fit with room: a 20-search browse loop 141 calls, a 200-file read+patch 402
    )
    max_stdout_bytes: int = 50_000
    max_stderr_bytes: int = 10_000
    kill_grace: float = 5.0
    python: str = sys.executable
    warm: bool = True
    fork_server: bool = True  # fork children from a pre-imported interpreter (host or backend mode)
    max_parallel_calls: int = 16
    env_passthrough: list[str] = field(default_factory=list)
    exec_mode: str = "host"  # host: the script runs here | backend: inside the backend (open() acts there)
    remote_python: str = "python3"  # the backend's interpreter for exec_mode "backend" (3.8 or newer)
    # exec_mode "backend": read_file, write_file and patch run next to the script, in the backend
    # (False: every tool call goes back to Herald)
    backend_tools: bool = True
    isolation: str = "auto"  # auto | bwrap | landlock | none: what the script sees (sandbox/isolation.py)
    network: str = "none"  # none: no network inside the isolation | host: this machine's network
    ro_binds: list[str] = field(default_factory=list)  # extra paths the isolated script may read
    rw_binds: list[str] = field(default_factory=list)  # extra paths it may also write
    max_spill_bytes: int = 256 * 1024 * 1024  # one run's spill files in all (output, its tool calls); 0: none
    # Bytes Herald holds at once for one run's calls in flight (frames, arguments, replies, files a
    # tool loads: herald/inflight.py); a call past it is refused with what to do; 0: no cap
    max_inflight_bytes: int = 256 * 1024 * 1024
    spill_retention: float = 7 * 24 * 3600.0  # seconds spill files are kept (swept when a Runtime starts); 0: forever
    # Per-script budgets beyond the call count, e.g. {web_calls = 20, reply_bytes = 5_000_000} (policy/budgets.py)
    budgets: dict[str, float] = field(default_factory=dict)
    # When tools' warm-ups (Chromium's launch, ...) start ahead of their first call (runtime/offer.py):
    # "auto": every offered tool when a model's session starts (herald run), else the tools the
    # session's `tools` list names and those a script names as it starts; "named": only those;
    # "offered": every offered tool when any session starts; "off": on the first call.
    warm_tools: str = "auto"


@dataclass
class TerminalSettings:
    timeout: float = 180.0
    max_output_bytes: int = 1_000_000
    shell: str = "bash"


@dataclass
class FilesSettings:
    read_max_bytes: int = 20_000_000
    read_max_line_chars: int = 2000
    read_max_chars: int = 100_000
    search: str = "auto"  # auto: ripgrep when installed | python: always the pure-Python search


@dataclass
class SSHSettings:
    key_file: str = ""  # private key; empty: the ssh-agent, then ~/.ssh/id_*
    use_agent: bool = True  # offer the keys of a running ssh-agent ($SSH_AUTH_SOCK)
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_policy: str = "strict"  # strict: unknown hosts are refused | accept-new: trust and record them
    connect_timeout: float = 10.0  # seconds to reach the host and log in
    keepalive: float = 15.0  # seconds between keepalives on an idle connection; 0: none


@dataclass
class DockerSettings:
    image: str = "python:3.12-slim"  # docker:IMAGE overrides it; it needs bash (python3 for exec_mode backend)
    host: str = ""  # the engine; empty: $DOCKER_HOST, else unix:///var/run/docker.sock
    workdir: str = "/workspace"  # where the session starts; created when missing
    user: str = ""  # empty: the image's user
    network: str = ""  # empty: the engine's default network | none: no network | a network's name
    memory: str = "2g"  # memory limit (swap included), e.g. 512m
    cpus: float = 1.0
    pids_limit: int = 512
    tmp_size: str = "512m"  # tmpfs on /tmp; empty: no tmpfs
    cap_add: list[str] = field(default_factory=lambda: ["CHOWN", "DAC_OVERRIDE", "FOWNER"])  # on top of none
    name: str = ""  # keep the container (herald-NAME) after close and reuse it in later runs
    connect_timeout: float = 5.0  # seconds to reach the engine
    api_timeout: float = 120.0  # seconds for one engine request (image pulls excepted)


@dataclass
class ModalSettings:
    image: str = "python:3.12-slim"  # modal:IMAGE overrides it: a registry image, or an image id (im-...)
    app: str = "herald"  # the Modal app the sandboxes belong to (created when missing)
    workdir: str = "/workspace"
    timeout: int = 3600  # seconds a sandbox may live
    idle_timeout: int = 600  # seconds without activity before Modal stops the sandbox; 0: no limit
    cpu: float = 1.0
    memory: int = 2048  # MiB
    block_network: bool = False
    snapshot_on_close: bool = False  # snapshot the file system on close; its image id is reported
    connect_timeout: float = 15.0  # seconds for the first request to Modal


@dataclass
class BrowserSettings:
    cdp_url: str = ""  # attach to this browser (ws://, wss:// or http://host:port) instead of launching
    executable: str = ""  # the Chromium to launch; empty: chromium (or chrome) found on PATH
    headless: bool = True
    launch_timeout: float = 30.0  # seconds to launch Chromium or attach over CDP
    navigation_timeout: float = 30.0  # seconds for a page to load
    action_timeout: float = 10.0  # seconds for a click or typing to find its element ready
    snapshot_max_bytes: int = 40_000  # longer snapshots are cut (head + tail) and spilled to a file
    extra_args: list[str] = field(default_factory=list)  # more Chromium command-line flags
    network: str = (
        "backend"  # backend: the browser and web_extract connect from the backend (its localhost) | local: from here
    )


@dataclass
class WebSettings:
    firecrawl_api_url: str = ""  # a self-hosted Firecrawl; else $FIRECRAWL_API_URL, else the cloud
    firecrawl_api_key: str = ""  # else $FIRECRAWL_API_KEY
    extract: str = "auto"  # auto: Firecrawl when configured, else fetch + extract here | firecrawl | direct
    extract_char_limit: int = 20_000  # per page; longer pages are cut (head + tail) and spilled
    fetch_timeout: float = 30.0  # seconds per page (or per Firecrawl request)
    max_concurrency: int = 10  # pages fetched at once by one web_extract call
    # web_search's provider: auto (the first configured of SEARCH_PROVIDERS[1:]) or one of them
    search_provider: str = "auto"
    searxng_url: str = ""  # a SearXNG instance with the JSON format on, e.g. http://searxng.lan:8080
    brave_api_key: str = ""  # else $BRAVE_API_KEY, else $BRAVE_SEARCH_API_KEY
    brave_api_url: str = ""  # empty: https://api.search.brave.com
    tavily_api_key: str = ""  # else $TAVILY_API_KEY
    tavily_api_url: str = ""  # empty: https://api.tavily.com
    exa_api_key: str = ""  # else $EXA_API_KEY
    exa_api_url: str = ""  # empty: https://api.exa.ai
    # Requests in flight to one host, across all calls of a session: as many as one call fetches at
    # once (web.max_concurrency), so a call to one site is not held back, while parallel() of many
    # calls cannot multiply what one site sees.
    max_per_host: int = 10
    user_agent: str = ""  # the User-Agent of fetches made here; "" = Herald's own (web/fetch.py)
    cache_max_bytes: int = 64 * 1024 * 1024  # the session's page cache (least recently used out)
    cache_ttl: float = 3600.0  # seconds a page with no caching headers counts as fresh (0: refetch)
    extract_workers: int = 0  # processes that extract fetched pages, per session; 0 = one per CPU core
    extract_worker_memory_mb: int = 1024  # address space per extraction process; a page needing more fails alone


@dataclass
class AgentSettings:
    provider: str = ""  # openai | anthropic | openrouter | ollama | vllm | custom; "" = from the API keys set
    model: str = ""
    base_url: str = ""
    api_mode: str = ""  # "" = from provider, then base URL | chat_completions | anthropic_messages
    api_key: str = ""  # for the primary provider; the provider's environment variable is preferred
    fallback: list[str] = field(default_factory=list)  # "PROVIDER:MODEL[@BASE_URL]", tried in order
    max_turns: int = 90  # model turns per run; turns whose only call is execute_code are refunded
    max_retries: int = 3  # per provider, for retryable errors (rate limit, 5xx, timeouts)
    retry_base_delay: float = 2.0  # seconds; doubles each retry, plus jitter
    retry_max_delay: float = 60.0
    request_timeout: float = 600.0
    stream: bool = True
    max_tokens: int = 8192  # output tokens per model call
    context_window: int = 200_000  # tokens; the history is compressed past compress_at of it
    compress_at: float = 0.75
    max_tool_result_bytes: int = 100_000  # larger tool results are cut (head + tail + spill file)
    guard_warn_after: int = 2  # identical failing calls (or read-only calls with the same result)
    guard_block_after: int = 4
    prompt_cache: bool = True  # Anthropic cache_control markers
    # Keep each execute_code run's calls and full results for `herald replay SESSION --run N`
    # (<sessions_dir>/<id>.runs/); every call then goes to Herald (sandbox.backend_tools off).
    record_runs: bool = False


@dataclass
class PolicySettings:
    profile: str = "workspace-write"  # read-only | workspace-write | full (herald/policy/)
    roots: list[str] = field(default_factory=list)  # workspace roots besides the session's directory
    allowed_domains: list[str] = field(default_factory=list)  # web and browser only there; empty: any
    # Per-tool rules, "allow|deny|ask TOOL [path=GLOB|command=PREFIX|domain=NAME]" (policy/rules.py)
    rules: list[str] = field(default_factory=list)


@dataclass
class CheckpointsSettings:
    """Workspace snapshots (herald/checkpoints/): a checkpoint before each run that changed files."""

    enabled: bool = True  # a session checkpoint before each execute_code run that follows a change
    keep: int = 20  # checkpoints kept per session (oldest dropped first)
    max_store_mb: int = 1024  # one workspace's snapshot store; past it, oldest checkpoints go first
    max_file_mb: int = 20  # a bigger file is not covered (listed as such, never treated as unchanged)
    max_files: int = 50_000  # a bigger workspace is not snapshotted (checkpoints turn off with one note)


@dataclass
class ServeSettings:
    """`herald mcp serve --http`: who may connect, what each client may do (cli/mcpauth.py, mcplimits.py)."""

    auth: str = "token"  # token: bearer tokens (token_file) | oauth: tokens of oauth_issuer | none: loopback only
    token_file: str = ""  # "name:token" lines, 0600; empty: data_dir/mcp/tokens, generated on first use
    # Whose kernel sessions (execute_code's `session`) a client reaches: "client": its own MCP
    # session's only | "identity": every MCP session of the same token | "shared": every client's
    session_scope: str = "client"
    max_concurrent_runs: int = 4  # per identity: runs running or waiting for the Runtime; more are refused
    max_runs_per_minute: int = 120  # per identity, over the last 60 s
    max_request_bytes: int = 4 * 1024 * 1024  # one HTTP request's body (a script and its arguments)
    oauth_issuer: str = ""  # the authorization server (its URL, advertised to clients)
    oauth_introspection_url: str = ""  # its RFC 7662 endpoint; tokens are checked there
    oauth_client_id: str = ""  # Herald's credentials for the introspection endpoint, when it needs them
    oauth_client_secret: str = ""  # better from $HERALD_SERVE_OAUTH_CLIENT_SECRET than from a file
    oauth_resource: str = ""  # this server's URL as tokens name it (aud); empty: http://HOST:PORT/mcp
    oauth_scopes: list[str] = field(default_factory=list)  # scopes a token must carry


@dataclass
class Settings:
    data_dir: Path = field(default_factory=lambda: _default_data_dir())
    backend: str = "local"  # local | docker[:IMAGE] | ssh://USER@HOST[:PORT] | modal[:IMAGE]
    tools: list[str] | None = None  # enabled tools; None means every registered tool
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    terminal: TerminalSettings = field(default_factory=TerminalSettings)
    files: FilesSettings = field(default_factory=FilesSettings)
    ssh: SSHSettings = field(default_factory=SSHSettings)
    docker: DockerSettings = field(default_factory=DockerSettings)
    modal: ModalSettings = field(default_factory=ModalSettings)
    browser: BrowserSettings = field(default_factory=BrowserSettings)
    web: WebSettings = field(default_factory=WebSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    policy: PolicySettings = field(default_factory=PolicySettings)
    mcp_servers: dict[str, McpServerSettings] = field(default_factory=dict)  # mcp_servers.py
    serve: ServeSettings = field(default_factory=ServeSettings)
    checkpoints: CheckpointsSettings = field(default_factory=CheckpointsSettings)

    @property
    def spill_dir(self) -> Path:
        return self.data_dir / "spill"

    @property
    def transcript_dir(self) -> Path:
        return self.data_dir / "transcripts"

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    def with_overrides(self, overrides: Mapping[str, Any], *, source: str = "override") -> Settings:
        """A copy with dotted keys replaced, e.g. {"sandbox.timeout": 5}; None values are skipped.
        `source` names where they came from in error messages."""
        copy = dataclasses.replace(
            self,
            sandbox=dataclasses.replace(self.sandbox),
            terminal=dataclasses.replace(self.terminal),
            files=dataclasses.replace(self.files),
            ssh=dataclasses.replace(self.ssh),
            docker=dataclasses.replace(self.docker),
            modal=dataclasses.replace(self.modal),
            browser=dataclasses.replace(self.browser),
            web=dataclasses.replace(self.web),
            agent=dataclasses.replace(self.agent, fallback=list(self.agent.fallback)),
            policy=dataclasses.replace(self.policy),
            serve=dataclasses.replace(self.serve, oauth_scopes=list(self.serve.oauth_scopes)),
            checkpoints=dataclasses.replace(self.checkpoints),
        )
        for key, value in overrides.items():
            if value is not None:
                _assign(copy, key, value, source)
        return copy


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "herald"


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("HERALD_CONFIG"):
        return Path(env["HERALD_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "herald" / "config.toml"


def herald_files(settings: Settings) -> list[str]:
    """Herald's own files on this machine, which neither a script nor a file tool may touch:
    its data directory (transcripts, sessions, spill files) and its config (the file in use,
    and its default directory)."""
    config = default_config_path()
    files = [str(settings.data_dir), str(config), str(default_config_path({}).parent)]
    if not os.environ.get("HERALD_CONFIG"):
        files.append(str(config.parent))
    return files


def load_settings(
    config_path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    env = os.environ if env is None else env
    settings = Settings()
    path = config_path or default_config_path(env)
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        for key, value in _flatten(data):
            _assign(settings, key, value, str(path))
    elif config_path is not None:
        raise ConfigError(f"config file {config_path} does not exist")
    for key in _all_keys():
        name = "HERALD_" + key.replace(".", "_").upper()
        # An empty variable means "not set", except HERALD_TOOLS="": no tools (never all of them).
        if name in env and (env[name] != "" or key == "tools"):
            _assign(settings, key, env[name], f"environment variable {name}")
    return settings.with_overrides(overrides or {})


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        section = getattr(Settings(), dotted, None) if not prefix else None
        if isinstance(value, dict) and dataclasses.is_dataclass(section):
            items.extend(_flatten(value, dotted + "."))
        else:
            items.append((dotted, value))
    return items


def _all_keys() -> list[str]:
    keys: list[str] = []
    defaults = Settings()
    for f in dataclasses.fields(Settings):
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            keys.extend(f"{f.name}.{sub.name}" for sub in dataclasses.fields(value))
        else:
            keys.append(f.name)
    return keys


def _assign(settings: Settings, key: str, value: Any, source: str) -> None:
    if key not in _all_keys():
        raise ConfigError(f"{source}: unknown setting '{key}'. Known settings: {', '.join(_all_keys())}")
    target: Any = settings
    *parents, name = key.split(".")
    for parent in parents:
        target = getattr(target, parent)
    current = getattr(target, name)
    setattr(target, name, coerce(key, value, current, source))
