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


class ConfigError(ValueError):
    """A setting is unknown or has a value of the wrong type; the message says which and where."""


@dataclass
class SandboxSettings:
    timeout: float = 300.0
    max_tool_calls: int = 50
    max_stdout_bytes: int = 50_000
    max_stderr_bytes: int = 10_000
    kill_grace: float = 5.0
    python: str = sys.executable
    warm: bool = True
    max_parallel_calls: int = 16
    env_passthrough: list[str] = field(default_factory=list)


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
class Settings:
    data_dir: Path = field(default_factory=lambda: _default_data_dir())
    backend: str = "local"  # local | docker[:IMAGE] | ssh://USER@HOST[:PORT] | modal[:IMAGE]
    tools: list[str] | None = None  # enabled tools; None means every registered tool
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    terminal: TerminalSettings = field(default_factory=TerminalSettings)
    files: FilesSettings = field(default_factory=FilesSettings)

    @property
    def spill_dir(self) -> Path:
        return self.data_dir / "spill"

    @property
    def transcript_dir(self) -> Path:
        return self.data_dir / "transcripts"

    def with_overrides(self, overrides: Mapping[str, Any]) -> Settings:
        """A copy with dotted keys replaced, e.g. {"sandbox.timeout": 5}."""
        copy = dataclasses.replace(
            self,
            sandbox=dataclasses.replace(self.sandbox),
            terminal=dataclasses.replace(self.terminal),
            files=dataclasses.replace(self.files),
        )
        for key, value in overrides.items():
            if value is not None:
                _assign(copy, key, value, "override")
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
        if name in env and env[name] != "":
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
    setattr(target, name, _coerce(key, value, current, source))


def _coerce(key: str, value: Any, current: Any, source: str) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{source}: setting '{key}' must be {expected}, got {value!r}")

    if key == "tools":
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        if isinstance(value, list | tuple) and all(isinstance(t, str) for t in value):
            return list(value)
        raise bad("a list of tool names")
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            return value.lower() in {"1", "true", "yes", "on"}
        raise bad("true or false")
    if isinstance(current, int | float):
        try:
            number = float(value) if isinstance(current, float) else int(value)
        except (TypeError, ValueError):
            raise bad("a number") from None
        if number < 0:
            raise bad("zero or more")
        return number
    if isinstance(current, Path):
        return Path(str(value)).expanduser()
    if isinstance(current, list):
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list):
            return [str(v) for v in value]
        raise bad("a list")
    if isinstance(value, str):
        return value
    raise bad("a string")
