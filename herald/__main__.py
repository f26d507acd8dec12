"""`python -m herald` is the `herald` command."""

from .cli import run

run()
