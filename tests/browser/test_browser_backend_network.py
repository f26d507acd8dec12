"""The browser's network is the backend's (`browser.network = "backend"`, the default): an app
bound to the backend's 127.0.0.1 is what the local Chromium and web_extract reach, never
a decoy on this machine's same port.

Real parts: a Docker container with its network off (the relay on the exec stream), an sshd in
a network namespace of its own (direct-tcpip), real Chromium behind Herald's checking proxy.
The app starts with direct tool calls (write_file, `terminal` with `&`), as a model would, and
stays up across runs; a script in the backend (exec_mode "backend") then drives it: navigate,
snapshot, click (its fetch() and its WebSocket), type, and web_extract. The policy still applies
on this path: names and literals refused by the URL check, and a name the *backend* resolves to
a metadata address refused by the address check.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.docker import DockerBackend
from herald.backends.ssh import SSHBackend
from tests.fixtures.dockerd import MakeDockerBackend
from tests.fixtures.netns_sshd import NetnsSSHServer
from tests.fixtures.remote_app import Decoy, start_app

Call = Callable[..., dict[str, Any]]

# The whole loop from one script in the backend. Polls are bounded by count (the page's script
# runs after the click returns); the verdict does not depend on how fast it is.
DRIVE = """
import json, re, time
from hermes_tools import browser_navigate, browser_snapshot, browser_click, browser_type, web_extract
url = "http://127.0.0.1:{port}/"
seen = {{"title": browser_navigate(url)["title"]}}
page = browser_snapshot()["snapshot"]
browser_click(re.search(r'"Load data" (@e\\d+)', page).group(1))
for _ in range(300):
    page = browser_snapshot()["snapshot"]
    if "xhr says" in page and "ws says" in page:
        break
    time.sleep(0.05)
seen["xhr"] = re.search(r"xhr says [\\w-]+", page).group(0)
seen["ws"] = re.search(r"ws says [\\w -]+", page).group(0)
browser_type(re.search(r'textbox "Name" (@e\\d+)', page).group(1), "typed-in-{marker}")
for _ in range(300):
    page = browser_snapshot()["snapshot"]
    if "typed typed-in" in page:
        break
    time.sleep(0.05)
seen["typed"] = re.search(r"typed typed-in-\\w+", page).group(0)
page = browser_snapshot()["snapshot"]
browser_click(re.search(r'link "Second page" (@e\\d+)', page).group(1))
seen["second"] = browser_snapshot()["title"]
extracted = web_extract(url)["results"][0]
seen["extract"] = extracted.get("content") or extracted.get("error")
print(json.dumps(seen))
"""


@pytest.fixture
def decoy() -> Iterator[Decoy]:
    server = Decoy()
    yield server
    server.close()


@pytest.fixture
def runtimes() -> Iterator[list[Runtime]]:
    made: list[Runtime] = []
    yield made
    for runtime in made:
        runtime.close()


def _runtime(backend: Any, settings: Settings, made: list[Runtime]) -> tuple[Runtime, Call]:
    runtime = Runtime(backend, settings=settings, exec_mode="backend")
    made.append(runtime)

    def call(name: str, **args: Any) -> dict[str, Any]:
        return runtime.dispatcher.call_direct(name, args)

    return runtime, call


def _drive(runtime: Runtime, port: int, marker: str) -> dict[str, str]:
    result = runtime.execute(DRIVE.format(port=port, marker=marker), timeout=120)
    assert result.status == "success", (result.output, result.error)
    seen: dict[str, str] = json.loads(result.output.strip().splitlines()[-1])
    return seen


def _expect_the_app(seen: dict[str, str], marker: str) -> None:
    assert seen["title"] == f"Inside app {marker}"
    assert seen["xhr"] == f"xhr says inside-{marker}"  # fetch() from the page
    assert seen["ws"] == f"ws says pong ping {marker}"  # the page's WebSocket
    assert seen["typed"] == f"typed typed-in-{marker}"
    assert seen["second"] == f"Second {marker}"
    assert f"Hello from inside {marker}" in seen["extract"]  # web_extract fetched it the same way
    assert "DECOY" not in json.dumps(seen)


# -- Docker: the container's network is off; its loopback answers through the relay ------------


def test_a_script_drives_an_app_inside_a_container_with_its_network_off(
        chromium: str, make_docker_backend: MakeDockerBackend, decoy: Decoy, runtimes: list[Runtime]) -> None:
    backend: DockerBackend = make_docker_backend()
    assert backend.settings.docker.network == "none"
    runtime, call = _runtime(backend, backend.settings, runtimes)
    marker = uuid.uuid4().hex[:8]
    start_app(call, decoy.port, marker)  # the same port as the decoy here: the container's own loopback
    _expect_the_app(_drive(runtime, decoy.port, marker), marker)
    # Another run, after more direct calls: the app started by a direct call is still up.
    assert call("terminal", command="true")["result"]["exit_code"] == 0
    _expect_the_app(_drive(runtime, decoy.port, marker), marker)
    assert decoy.hits == []


def test_browser_network_local_still_sees_this_machine(
        chromium: str, make_docker_backend: MakeDockerBackend, decoy: Decoy, runtimes: list[Runtime]) -> None:
    backend = make_docker_backend(**{"browser.network": "local"})
    _, call = _runtime(backend, backend.settings, runtimes)
    marker = uuid.uuid4().hex[:8]
    start_app(call, decoy.port, marker)
    reply = call("browser_navigate", url=f"http://127.0.0.1:{decoy.port}/")
    assert reply["result"]["title"] == "DECOY", reply
    extracted = call("web_extract", urls=f"http://127.0.0.1:{decoy.port}/")["result"]["results"][0]
    assert "DECOY" in extracted["content"], extracted
    assert len(decoy.hits) >= 2


def test_the_policy_applies_on_the_backend_path(
        chromium: str, make_docker_backend: MakeDockerBackend, decoy: Decoy, runtimes: list[Runtime]) -> None:
    backend = make_docker_backend(**{"policy.allowed_domains": ["localhost", "metadata-alias.test"]})
    _, call = _runtime(backend, backend.settings, runtimes)
    marker = uuid.uuid4().hex[:8]
    start_app(call, decoy.port, marker)
    # Allowed by name, resolved in the container: the app.
    reply = call("browser_navigate", url=f"http://localhost:{decoy.port}/")
    assert reply["result"]["title"] == f"Inside app {marker}", reply
    # A literal outside allowed_domains: refused as a navigation and as a page's subresource.
    reply = call("browser_navigate", url=f"http://127.0.0.1:{decoy.port}/")
    assert reply["error"]["type"] == "PolicyRefused", reply
    reply = call("browser_navigate", url=f"http://localhost:{decoy.port}/image-from?127.0.0.1:{decoy.port}")
    assert reply["result"]["title"] == f"Image {marker}", reply
    hits = call("terminal", command=f"cat hits-{marker}")["result"]["output"].split()
    assert f"/image-from?127.0.0.1:{decoy.port}" in hits and "/pixel.png" not in hits, hits  # the image never loaded
    # A name that resolves to the metadata address *in the container* (its /etc/hosts): this
    # machine cannot resolve it at all, so only the check of the container's answer refuses it.
    hosts = call(
        "terminal",
        command="echo '169.254.169.254 metadata-alias.test' >> /etc/hosts && getent hosts metadata-alias.test",
    )
    assert "169.254.169.254" in hosts["result"]["output"], hosts
    reply = call("browser_navigate", url=f"http://metadata-alias.test:{decoy.port}/")
    assert reply["error"]["type"] == "PolicyRefused", reply
    assert "metadata-alias.test resolves to 169.254.169.254" in reply["error"]["message"], reply
    page = call("web_extract", urls=f"http://metadata-alias.test:{decoy.port}/")["result"]["results"][0]
    assert "metadata-alias.test resolves to 169.254.169.254" in page["error"], page
    assert decoy.hits == []


# -- SSH: a host whose localhost is not this machine's (its own network namespace) ---------------


def test_a_script_drives_an_app_on_an_ssh_host_whose_localhost_differs(
        chromium: str, netns_sshd: NetnsSSHServer, settings: Settings, decoy: Decoy, runtimes: list[Runtime]) -> None:
    session = settings.with_overrides(netns_sshd.overrides)
    backend = SSHBackend(netns_sshd.spec, settings=session)
    try:
        runtime, call = _runtime(backend, session, runtimes)
        marker = uuid.uuid4().hex[:8]
        start_app(call, decoy.port, marker)
        reply = call("terminal", command=f"cat < /dev/null > /dev/tcp/127.0.0.1/{decoy.port} && echo reached")
        assert reply["result"]["output"] == "reached", reply  # bash on the host reaches its app
        _expect_the_app(_drive(runtime, decoy.port, marker), marker)
        _expect_the_app(_drive(runtime, decoy.port, marker), marker)  # still up, next run
        # Names resolve on the host: one only its /etc/hosts has reaches the app; one it
        # resolves to the metadata address is refused (this machine resolves neither).
        reply = call("browser_navigate", url=f"http://inside-app.test:{decoy.port}/")
        assert reply["result"]["title"] == f"Inside app {marker}", reply
        reply = call("browser_navigate", url=f"http://metadata-alias.test:{decoy.port}/")
        assert reply["error"]["type"] == "PolicyRefused", reply
        assert "metadata-alias.test resolves to 169.254.169.254" in reply["error"]["message"], reply
        page = call("web_extract", urls=f"http://metadata-alias.test:{decoy.port}/")["result"]["results"][0]
        assert "metadata-alias.test resolves to 169.254.169.254" in page["error"], page
        assert decoy.hits == []
        # The opt-out: this machine's network, the decoy.
        local = SSHBackend(netns_sshd.spec, settings=session.with_overrides({"browser.network": "local"}))
        try:
            _, local_call = _runtime(local, local.settings, runtimes)
            reply = local_call("browser_navigate", url=f"http://127.0.0.1:{decoy.port}/")
            assert reply["result"]["title"] == "DECOY", reply
        finally:
            runtimes[-1].close()
            local.close()
    finally:
        for runtime in runtimes:
            runtime.close()
        backend.close()


# -- A browser attached over CDP -----------------------------------------------------------------


def test_an_attached_browser_on_this_machine_reaches_the_container_through_a_context_of_its_own(
        cdp_chromium: Any, make_docker_backend: MakeDockerBackend, decoy: Decoy, runtimes: list[Runtime]) -> None:
    backend = make_docker_backend(**{"browser.cdp_url": cdp_chromium.url, "policy.allowed_domains": ["localhost"]})
    _, call = _runtime(backend, backend.settings, runtimes)
    marker = uuid.uuid4().hex[:8]
    start_app(call, decoy.port, marker)
    reply = call("browser_navigate", url=f"http://localhost:{decoy.port}/")
    assert reply["result"]["title"] == f"Inside app {marker}", reply
    # The context's connections pass Herald's proxy, so the policy sees every hop, as for a
    # launched browser: a subresource on a host outside allowed_domains never loads.
    reply = call("browser_navigate", url=f"http://localhost:{decoy.port}/image-from?127.0.0.1:{decoy.port}")
    assert reply["result"]["title"] == f"Image {marker}", reply
    hits = call("terminal", command=f"cat hits-{marker}")["result"]["output"].split()
    assert "/pixel.png" not in hits, hits
    assert decoy.hits == []


def test_an_attached_browser_elsewhere_is_told_to_the_model_not_proxied() -> None:
    """A cloud browser cannot reach a proxy on this machine's loopback: it keeps its own
    network, and the first result says the backend's localhost is out of its reach."""
    from herald.browser.guard import RefusalLog, session_guard
    from herald.webguard import checked_dial

    dial = checked_dial(None)
    guard, note = session_guard("wss://connect.browserbase.com?apiKey=x", None, RefusalLog(), dial)
    assert guard is None and note is not None and "not on this machine" in note
    guard, note = session_guard("http://127.0.0.1:9222", None, RefusalLog(), dial)
    assert guard is not None and note is None
    guard.close()
    assert session_guard("http://127.0.0.1:9222", None, None, None) == (None, None)  # nothing to do


# -- The proxy is the session's way into the backend: not another local user's -------------------

BORROW = """
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), 10) as sock:
    sock.sendall(("GET http://127.0.0.1:%s/api/data HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" % sys.argv[2]).encode())
    print(sock.recv(65536).decode().split("\\r\\n")[0])
"""


def test_another_user_on_this_machine_cannot_reach_the_container_through_the_proxy(
        make_docker_backend: MakeDockerBackend, decoy: Decoy, runtimes: list[Runtime]) -> None:
    import pwd
    import subprocess
    import sys

    from herald.browser.guard import GuardProxy, RefusalLog
    from herald.webguard import checked_dial
    from tests.fixtures.accounts import ensure_user
    from tests.fixtures.users import USER

    backend = make_docker_backend()
    _, call = _runtime(backend, backend.settings, runtimes)
    marker = uuid.uuid4().hex[:8]
    start_app(call, decoy.port, marker)
    guard = GuardProxy(None, RefusalLog(), checked_dial(None, backend.open_tcp))
    try:
        mine = subprocess.run([sys.executable, "-c", BORROW, str(guard.port), str(decoy.port)],
                              capture_output=True, text=True, timeout=60)
        assert mine.stdout.strip() == "HTTP/1.0 200 OK" or mine.stdout.strip() == "HTTP/1.1 200 OK", mine
        if os.geteuid() != 0:
            pytest.skip("not root: no other user to try the proxy as (checked as ourselves above)")
        ensure_user(USER)
        other = pwd.getpwnam(USER)
        theirs = subprocess.run(["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--init-groups", "--",
                                 "/usr/bin/python3", "-I", "-c", BORROW, str(guard.port), str(decoy.port)],
                                capture_output=True, text=True, timeout=60, cwd="/")
        assert theirs.stdout.strip() == "HTTP/1.1 403 Forbidden", theirs
    finally:
        guard.close()
    hits = call("terminal", command=f"cat hits-{marker}")["result"]["output"].split()
    assert hits == ["/api/data"], hits  # ours only


# -- The command line: one script starts the app in the container and drives it -----------------


def test_herald_exec_in_a_container_starts_the_app_and_drives_it_from_one_script(
        chromium: str, docker_engine_url: str, docker_test_image: str, decoy: Decoy, tmp_path: Any) -> None:
    """`herald exec script.py --backend docker:IMAGE --exec-mode backend`: the script starts the
    app as its own child in the container (it lives as long as the script) and drives it."""
    import subprocess
    import sys

    from tests.fixtures.remote_app import APP_SOURCE

    script = tmp_path / "drive.py"
    script.write_text(f"""
import socket, subprocess, sys, time
open("app.py", "w").write({APP_SOURCE!r})
app = subprocess.Popen([sys.executable, "app.py", "{decoy.port}", "cli"])
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", {decoy.port}), 1).close()
        break
    except OSError:
        time.sleep(0.1)
from hermes_tools import browser_navigate, web_extract
print(browser_navigate("http://127.0.0.1:{decoy.port}/")["title"])
page = web_extract("http://127.0.0.1:{decoy.port}/api/data")["results"][0]
print(page.get("content", page))  # a failed page says why in the test's output
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update({"HERALD_DATA_DIR": str(tmp_path / "data"), "HERALD_CONFIG": str(tmp_path / "none.toml")})
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "herald",
            "exec",
            str(script),
            "--backend",
            f"docker:{docker_test_image}",
            "--exec-mode",
            "backend",
            "-c",
            f'docker.host="{docker_engine_url}"',
            "-c",
            'docker.network="none"',
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Inside app cli", '{"word": "inside-cli"}'], done.stdout
    assert decoy.hits == []


def test_browser_network_takes_backend_or_local_only(settings: Settings) -> None:
    from herald.config import ConfigError

    assert settings.browser.network == "backend"
    assert settings.with_overrides({"browser.network": "local"}).browser.network == "local"
    with pytest.raises(ConfigError, match=r'browser\.network.*one of "backend", "local"'):
        settings.with_overrides({"browser.network": "remote"})
