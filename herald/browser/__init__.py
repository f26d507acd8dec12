"""Browser sessions over Playwright: local Chromium or any CDP URL, read by snapshots with @eN refs.

`session.BrowserSession` (and `actions`, which it drives) import Playwright; `launch`, `snapshot`,
`guard` (the proxy every connection of a launched Chromium goes through) and `errors` do not, so
`herald tools` and `herald doctor` work without it.
"""

from .errors import BrowserError

__all__ = ["BrowserError"]
