"""`any_backend`: the same test against every backend that can run here.

Each backend kind is a fixture named `<kind>_backend` (local here; ssh and docker from
tests/fixtures/). A kind whose fixture does not exist yet, or whose service cannot run on this
machine, is skipped with the reason.
"""

from __future__ import annotations

from typing import Any

import pytest

BACKEND_KINDS = ["local", "ssh", "docker"]


@pytest.fixture(params=BACKEND_KINDS)
def any_backend(request: pytest.FixtureRequest) -> Any:
    name = f"{request.param}_backend"
    try:
        return request.getfixturevalue(name)
    except pytest.FixtureLookupError:
        pytest.skip(f"no {name} fixture: the {request.param} backend is not wired into the tests yet")
