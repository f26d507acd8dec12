# Everything installs itself: a fresh Debian 12 machine (root, Python 3.11) needs only `make`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.herald-installed
APT_PACKAGES := ripgrep bubblewrap
# The Docker backend's tests: a real dockerd, and debootstrap to build their image (no registry here).
APT_PACKAGES += docker.io debootstrap
# The browser tools drive Debian's Chromium through Playwright (never `playwright install`).
APT_PACKAGES += chromium
# The SSH backend's tests start their own sshd on 127.0.0.1 (tests/fixtures/sshd.py).
APT_PACKAGES += openssh-server
export DEBIAN_FRONTEND := noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup system-deps mcp-servers demo test lint lowest-deps bench clean

setup: $(STAMP) system-deps

$(STAMP): pyproject.toml
	@if ! $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null; then \
		echo "installing python3-venv"; apt-get update -qq && apt-get install -y -qq python3-venv; fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
	$(BIN)/python -m pip install -q -e '.[all,dev]' 2>&1 | grep -v -e '^WARNING: Location' -e '^ ' -e '^!!' || true
	@$(BIN)/python -c 'import herald, rich, openai, anthropic, pytest, xdist, docker, paramiko, playwright, modal, firecrawl, httpx, trafilatura, mcp' || { echo "python dependencies failed to install"; exit 1; }
	@touch $(STAMP)

# Debian packages Herald uses when present; installed only when missing and we are root.
system-deps:
	@missing=""; for pkg in $(APT_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing"; (apt-get update -qq && apt-get install -y -qq $$missing) >/dev/null; \
		else echo "note: install$$missing for full functionality (not root, skipping)"; fi; \
	fi

# Third-party MCP servers the MCP tests drive (PyPI: mcp-server-time, mcp-server-git in a venv of
# their own; npm: server-memory, server-everything), cached in ~/.cache/herald-tests. The tests
# install them too when this did not run; a server that cannot be installed skips its tests.
# node and npm come from Debian's nodejs and npm when the commands are missing (a machine with
# another node, e.g. NodeSource's, which bundles npm, is left as it is: Debian's npm conflicts with it).
mcp-servers: setup system-deps
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing nodejs npm"; (apt-get update -qq && apt-get install -y -qq nodejs npm) >/dev/null \
				|| echo "note: nodejs/npm could not be installed; the npm MCP servers' tests will skip"; \
		else echo "note: install nodejs and npm for the npm MCP servers' tests (not root, skipping)"; fi; \
	fi
	$(BIN)/python -m tests.mcp.servers || echo "note: some MCP test servers could not be installed; their tests will skip"

demo: setup
	$(BIN)/herald demo --dir .demo

lint: setup
	$(BIN)/ruff check herald tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports

# A fresh install as a new machine makes it: a new venv with its own pip (not upgraded: old pips
# resolve extras differently), Herald with every runtime extra and every direct dependency at the
# minimum pyproject.toml declares, then a smoke run of each extra through Herald's real code paths.
# The venv is cached in ~/.cache/herald-tests, keyed on pyproject.toml: a rerun takes seconds.
lowest-deps: setup
	$(PYTHON) tests/install/lowest_deps.py --python $(PYTHON)

# Three pytest-xdist workers, whole files each (--dist loadfile: a module's fixtures are built
# once, and its tests, which may look for their own processes, never run beside each other).
# Most of the suite waits (timeouts, sshd, dockerd, Chromium), so three share two cores well.
test: lint lowest-deps mcp-servers
	$(BIN)/python -m pytest -n 3 --dist loadfile --durations=25

bench: setup mcp-servers
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
