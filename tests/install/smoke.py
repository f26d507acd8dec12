"""Smoke run of every runtime extra, inside an install of Herald (lowest_deps.py runs it in the
venv that holds the minimum versions pyproject.toml declares).

Run from the repository root: `VENV/bin/python -m tests.install.smoke`. Only the standard library,
Herald and its runtime dependencies are needed (no pytest). Each check drives Herald the way a
person does — `python -m herald exec` / `herald run` in a subprocess — against stand-ins on
127.0.0.1: a small web site, tests/fakes' Firecrawl, Modal and LLM servers, a port that does not
speak SSH, a Docker socket that is not there. So a minimum version that lacks something Herald
calls fails here with Herald's own message. One line per check (ok / FAIL / skip); exit 1 when a
check failed.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import typing
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERALD_TIMEOUT = 300  # seconds for one herald command; a cold Chromium start is the slowest part
ARTICLE_SENTENCE = "Vega is a white main-sequence star about 25 light-years from the Sun."
RUSSIAN_SENTENCE = "Москва — столица России, крупнейший по численности населения город страны."
KEYS = ("FIRECRAWL_API_KEY", "FIRECRAWL_API_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY",
        "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_SERVER_URL", "DOCKER_HOST")


class Failed(Exception):
    """The check found Herald not working; the message says what happened."""


class Skipped(Exception):
    """The check cannot run on this machine (a missing system package); the message says why."""


# -- a small web site -----------------------------------------------------------------------------

def _article() -> bytes:
    paragraphs = "".join(f"<p>{ARTICLE_SENTENCE} This is paragraph {i} of the survey.</p>" for i in range(1, 5))
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Survey of Vega</title></head><body>"
        "<header><nav><a href='/'>Home</a> | <a href='/login'>Log in</a></nav></header>"
        f"<main><article><h1>Survey of Vega</h1>{paragraphs}</article></main>"
        "<footer><p>Copyright Example Observatory.</p></footer></body></html>"
    ).encode()


def _legacy_page() -> bytes:
    """A windows-1251 page that says so only in its <meta>, as old sites do."""
    paragraphs = "".join(f"<p>{RUSSIAN_SENTENCE} Абзац {i}.</p>" for i in range(1, 4))
    return (
        "<!doctype html><html><head><meta charset='windows-1251'><title>Москва</title></head><body>"
        f"<main><article><h1>Москва</h1>{paragraphs}</article></main></body></html>"
    ).encode("windows-1251")


def _browser_page() -> bytes:
    return (
        b"<!doctype html><html><head><meta charset='utf-8'><title>Smoke shop</title></head><body>"
        b"<h1>Smoke shop</h1><a href='/article'>Read the survey</a> <button>Say hello</button></body></html>"
    )


PAGES = {
    "/article": ("text/html; charset=utf-8", _article()),
    "/legacy": ("text/html", _legacy_page()),  # no charset in the header
    "/shop": ("text/html; charset=utf-8", _browser_page()),
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        kind, body = PAGES.get(self.path, ("text/plain", b"not found"))
        self.send_response(200 if self.path in PAGES else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def web_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def not_ssh() -> Iterator[int]:
    """A TCP port that answers like a web server, so an SSH client fails reading the banner."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()


class _DockerHandler(BaseHTTPRequestHandler):
    """Docker's engine API as far as a client's first steps: its version, then a refusal."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def address_string(self) -> str:
        return "unix-socket"

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?")[0]
        if path.endswith("/version"):
            status, payload = 200, {"ApiVersion": "1.41", "MinAPIVersion": "1.12", "Version": "smoke"}
        else:
            status, payload = 500, {"message": f"fake Docker engine: refusing {self.command} {path}"}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _answer


@contextlib.contextmanager
def fake_docker_engine(path: Path) -> Iterator[str]:
    """A Docker engine API on a Unix socket that tells its version and refuses the rest: the SDK's
    whole transport (requests and its http+docker adapter) is used before Herald gets the refusal."""
    server = socketserver.ThreadingUnixStreamServer(str(path), _DockerHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"unix://{path}"
    finally:
        server.shutdown()
        server.server_close()


# -- running herald ---------------------------------------------------------------------------------

class Herald:
    """`python -m herald ...` of this interpreter, with its own data dir, no config, no keys."""

    def __init__(self, root: Path) -> None:
        self.workspace = root / "work"
        self.workspace.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k not in KEYS and not k.startswith("HERALD_")}
        self.env.update(HERALD_DATA_DIR=str(root / "data"), HERALD_CONFIG=str(root / "none.toml"))
        # This checkout's Herald, whatever copy the interpreter has installed.
        self.env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

    def __call__(self, args: list[str], stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "herald", *args], cwd=self.workspace, env={**self.env, **env},
            input=stdin, capture_output=True, text=True, timeout=HERALD_TIMEOUT,
        )

    def script(self, code: str, *args: str, **env: str) -> str:
        """Run `code` with `herald exec`; its stdout, or Failed with Herald's own words. Checks
        name their tools (--tools), so a tool that cannot work is still called and says why."""
        proc = self(["exec", "-", *args], stdin=code, **env)
        if proc.returncode != 0:
            raise Failed(f"herald exec exited {proc.returncode}:\n{tail(proc.stderr)}")
        return proc.stdout

    def refusal(self, backend: str, **env: str) -> str:
        """What `herald exec --backend BACKEND` says when it cannot reach the backend."""
        proc = self(
            ["exec", "-", "--backend", backend], stdin="from hermes_tools import terminal\nterminal('true')\n", **env
        )
        if proc.returncode == 0:
            raise Failed(f"herald exec on {backend} succeeded where nothing should be reachable")
        if "Traceback" in proc.stderr:
            raise Failed(f"herald exec on {backend} crashed instead of saying what is wrong:\n{tail(proc.stderr)}")
        return proc.stderr.strip()


def tail(text: str, lines: int = 12) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


def last_json(stdout: str) -> typing.Any:
    lines = stdout.strip().splitlines()
    if not lines:
        raise Failed("the script printed nothing")
    return json.loads(lines[-1])


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


# -- the checks -------------------------------------------------------------------------------------

def check_web_extract(herald: Herald) -> str:
    with web_site() as site:
        reply = last_json(herald.script(
            "import json\nfrom hermes_tools import web_extract\n"
            f"print(json.dumps(web_extract([{site + '/article'!r}, {site + '/legacy'!r}])))\n",
            "--tools", "web_extract",
        ))
    expect(reply.get("source") == "direct", f"web_extract did not fetch the pages itself: {reply}")
    article, legacy = reply["results"]
    expect("error" not in article, f"web_extract failed on a plain article: {article.get('error')}")
    expect(ARTICLE_SENTENCE in article["content"], f"the article's text is missing from {article['content'][:300]!r}")
    expect("Copyright" not in article["content"], "the page's footer was not dropped")
    expect("error" not in legacy, f"web_extract failed on a windows-1251 page: {legacy.get('error')}")
    expect(RUSSIAN_SENTENCE in legacy["content"], f"a windows-1251 page came out as {legacy['content'][:120]!r}")
    return "keyless extraction of a local article and of a windows-1251 page"


def check_firecrawl(herald: Herald) -> str:
    from tests.fakes.firecrawl import FakeDocument, FakeFirecrawl

    doc = FakeDocument(
        "https://stars.example.org/vega", "Vega — star survey", f"# Vega\n\n{ARTICLE_SENTENCE}\n", "Notes on Vega"
    )
    with FakeFirecrawl([doc], api_key="fc-smoke") as firecrawl:
        reply = last_json(herald.script(
            "import json\nfrom hermes_tools import web_search, web_extract\n"
            "hits = web_search('vega survey', limit=3)['results']\n"
            "print(json.dumps(web_extract([hits[0]['url']])))\n",
            "--tools", "web_search,web_extract", FIRECRAWL_API_URL=firecrawl.url, FIRECRAWL_API_KEY="fc-smoke",
        ))
        paths = sorted(firecrawl.paths())
    expect(reply.get("source") == "firecrawl", f"web_extract did not go through Firecrawl: {reply}")
    (page,) = reply["results"]
    expect(ARTICLE_SENTENCE in page.get("content", ""), f"the scraped page came back as {page}")
    expect(paths == ["/v2/scrape", "/v2/search"], f"Firecrawl saw {paths}")
    return "web_search and web_extract through firecrawl-py against a local Firecrawl"


def check_browser(herald: Herald) -> str:
    from herald.browser.launch import find_chromium

    chromium = find_chromium("")
    if chromium is None:
        raise Skipped("no Chromium on PATH (apt-get install chromium; `make setup` installs it)")
    with web_site() as site:
        reply = last_json(herald.script(
            "import json\nfrom hermes_tools import browser_navigate, browser_snapshot\n"
            f"browser_navigate({site + '/shop'!r})\n"
            "print(json.dumps(browser_snapshot()))\n",
            "--tools", "browser_navigate,browser_snapshot",
        ))
    snapshot = reply.get("snapshot", "")
    expect(
        "Smoke shop" in snapshot and "Read the survey" in snapshot,
        f"the snapshot does not show the page: {snapshot[:300]!r}",
    )
    expect(reply.get("refs", 0) >= 2, f"the snapshot has {reply.get('refs')} refs, not the link and the button")
    return f"browser_navigate + browser_snapshot on {chromium}"


def check_ssh(herald: Herald) -> str:
    with not_ssh() as port:
        said = herald.refusal(f"ssh://smoke@127.0.0.1:{port}")
    expect("SSH protocol banner" in said, f"the SSH backend said: {said}")
    return "the SSH backend (paramiko) reports a port that does not speak SSH"


def check_docker(herald: Herald) -> str:
    with fake_docker_engine(herald.workspace.parent / "docker.sock") as url:
        said = herald.refusal("docker", DOCKER_HOST=url)
    expect("fake Docker engine: refusing" in said, f"the Docker backend said: {said}")
    return "the Docker backend through the docker SDK to a local engine API that refuses"


def check_modal(herald: Herald) -> str:
    from tests.fakes.modal_server import REFUSAL, RefusingModalServer

    with RefusingModalServer() as url:
        said = herald.refusal("modal", MODAL_SERVER_URL=url, MODAL_TOKEN_ID="ak-smoke", MODAL_TOKEN_SECRET="as-smoke")
    expect(REFUSAL in said, f"the Modal backend said: {said}")
    # Nothing offline creates a sandbox, so the file API Herald's Modal backend calls is checked
    # for presence (sandbox.filesystem: read_bytes, write_bytes, stat, list_files).
    import modal

    prop = inspect.getattr_static(modal.Sandbox, "filesystem", None)
    expect(isinstance(prop, property), "modal.Sandbox has no filesystem (Herald's Modal file operations use it)")
    assert isinstance(prop, property)
    filesystem = typing.get_type_hints(prop.fget).get("return")
    lacking = [m for m in ("read_bytes", "write_bytes", "stat", "list_files") if not hasattr(filesystem, m)]
    expect(not lacking, f"modal's Sandbox.filesystem has no {', '.join(lacking)} (Herald's Modal backend calls them)")
    return "the Modal backend through the SDK against a local Modal API server, and sandbox.filesystem's API"


def check_agent(protocol: typing.Literal["openai", "anthropic"]) -> Callable[[Herald], str]:
    def check(herald: Herald) -> str:
        from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

        (herald.workspace / "notes.txt").write_text("the answer is 42\n")
        (herald.workspace / ".gitignore").write_text("ignored/\n")
        (herald.workspace / "ignored").mkdir(exist_ok=True)
        (herald.workspace / "ignored" / "notes.txt").write_text("the answer is 41\n")
        code = (
            "from hermes_tools import read_file, search_files\n"
            "hits = search_files('answer', file_glob='*.txt')['matches']\n"
            "print(sorted(h['path'] for h in hits), read_file('notes.txt')['content'])\n"
        )
        with FakeLLMServer([calls(call("execute_code", code=code)), reply("It is 42.")]) as llm:
            key = "OPENAI_API_KEY" if protocol == "openai" else "ANTHROPIC_API_KEY"
            proc = herald(["run", "what is the answer?", "--provider", protocol, "--model", "smoke-model",
                           "--base-url", llm.base_url(protocol)], **{key: "sk-smoke"})
            results = [text for request in llm.requests for _, text in request.tool_results()]
        expect(proc.returncode == 0, f"herald run exited {proc.returncode}:\n{tail(proc.stderr)}")
        expect(proc.stdout.strip() == "It is 42.", f"herald run answered {proc.stdout!r}")
        expect(any("['notes.txt']" in r and "the answer is 42" in r for r in results),
               f"execute_code's result was not sent back to the model: {results}")
        return f"herald run through the {protocol} SDK: execute_code with read_file and search_files"

    return check


def check_mcp(herald: Herald) -> str:
    # Both ways at once: Herald's MCP client calls `herald mcp serve` (another Herald) as a server.
    inner = herald.workspace.parent / "inner"
    inner.mkdir()
    env = {"PYTHONPATH": herald.env["PYTHONPATH"], "HERALD_DATA_DIR": str(inner / "data"),
           "HERALD_CONFIG": str(inner / "none.toml")}
    config = herald.workspace.parent / "mcp.toml"
    config.write_text(f"[mcp_servers.inner]\ncommand = {json.dumps(sys.executable)}\n"
                      f"args = [\"-m\", \"herald\", \"mcp\", \"serve\", \"--cwd\", {json.dumps(str(inner))}]\n"
                      f"env = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in env.items())} }}\n")
    out = herald.script(
        "from hermes_tools import mcp_inner_execute_code as run\nprint(run('print(6 * 7)')['output'])\n",
        HERALD_CONFIG=str(config),
    )
    expect(out.strip() == "42", f"an MCP call to herald mcp serve printed {out!r}, not 42")
    return "herald exec calls execute_code of herald mcp serve over stdio"


def check_fast(herald: Herald) -> str:
    # The parent's frames and transcript go through orjson when the `fast` extra is installed.
    probe = subprocess.run([sys.executable, "-c", "import herald.fastjson as f; print(f.install())"],
                           env=herald.env, capture_output=True, text=True, timeout=HERALD_TIMEOUT)
    expect(probe.stdout.strip() == "True", f"orjson is not used by Herald:\n{tail(probe.stderr)}")
    out = herald.script("from hermes_tools import read_file, write_file\n"
                        "write_file('big.txt', str(2 ** 70) + ' ☃')\n"
                        "print(read_file('big.txt')['content'])\n")
    expect(out.strip() == f"1|{2 ** 70} ☃", f"a round trip through orjson printed {out!r}")
    return "tool calls from a script are encoded with orjson (and the stdlib where it refuses)"


CHECKS: dict[str, Callable[[Herald], str]] = {
    "web_extract (keyless)": check_web_extract,
    "web (Firecrawl)": check_firecrawl,
    "browser": check_browser,
    "ssh": check_ssh,
    "docker": check_docker,
    "modal": check_modal,
    "mcp": check_mcp,
    "fast (orjson)": check_fast,
    "agent (openai)": check_agent("openai"),
    "agent (anthropic)": check_agent("anthropic"),
}


def main() -> int:
    failed = []
    for name, check in CHECKS.items():
        root = Path(tempfile.mkdtemp(prefix="herald-smoke-"))
        started = time.monotonic()
        try:
            detail = check(Herald(root))
        except Skipped as exc:
            print(f"skip {name}: {exc}", flush=True)
            continue
        except Exception as exc:  # every check runs; each failure is reported with its reason
            failed.append(name)
            reason = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
            print(f"FAIL {name}: {reason}", flush=True)
            continue
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"ok   {name}: {detail} ({time.monotonic() - started:.1f} s)", flush=True)
    if failed:
        print(f"{len(failed)} of {len(CHECKS)} smoke checks failed: {', '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
