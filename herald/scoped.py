"""`with scoped(var, value):` — a context variable set for the length of a block.

A class, not a @contextmanager generator: the dispatcher sets four of these around every tool
call (its cwd, cancel event, foreground rule and spill budget), and a generator-based one costs
several times as much on that path.
"""

from __future__ import annotations

import contextvars
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class scoped(Generic[T]):
    """Set `var` to `value` until the block ends; with `value` None and `keep_on_none`, leave
    `var` as it is."""

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: contextvars.ContextVar[T], value: T, *, keep_on_none: bool = False) -> None:
        self._var: contextvars.ContextVar[T] | None = None if keep_on_none and value is None else var
        self._value = value
        self._token: contextvars.Token[T] | None = None

    def __enter__(self) -> None:
        if self._var is not None:
            self._token = self._var.set(self._value)

    def __exit__(self, *exc: Any) -> None:
        if self._var is not None and self._token is not None:
            self._var.reset(self._token)
