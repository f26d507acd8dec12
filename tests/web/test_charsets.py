"""Keyless web_extract reads a page in the charset it declares: the Content-Type header first, else
its <meta>, else trafilatura's detection on the raw bytes, never a blanket UTF-8. A real HTTP
server on 127.0.0.1 serves the same kinds of pages old sites do."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from .conftest import CallTool, extract_one, serving

MakeWeb = Callable[..., CallTool]
MOSCOW = "Москва — столица России, крупнейший по численности населения город страны."
HELLO = "Привет, мир. Ёлка."


def page(head: str, body: str) -> str:
    return f"<!doctype html><html><head>{head}</head><body><main><article>{body}</article></main></body></html>"


# path -> (Content-Type header, body bytes)
PAGES: dict[str, tuple[str, bytes]] = {
    # A long windows-1251 article whose charset is only in <meta charset>.
    "/cp1251-meta": (
        "text/html",
        page(
            "<meta charset='windows-1251'><title>Москва</title>",
            "<h1>Москва</h1>" + "".join(f"<p>{MOSCOW} Абзац {i}.</p>" for i in range(1, 4)),
        ).encode("cp1251"),
    ),
    # Too short for detection to be sure: only reading the <meta> gets it right.
    "/cp1251-short": (
        "text/html",
        page("<meta charset=windows-1251><title>Привет</title>", f"<p>{HELLO}</p>").encode("cp1251"),
    ),
    # The http-equiv form; iso-8859-1 as browsers read it (windows-1252: 0x93/0x94 are curly quotes).
    "/latin1-http-equiv": (
        "text/html",
        page(
            '<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1"><title>Café</title>',
            "<p>Le café crème et la “brûlée” sont très appréciés à Paris, où l'on déjeune tard.</p>",
        ).encode("cp1252"),
    ),
    # The header's charset beats a wrong <meta> (as in browsers) and detection.
    "/koi8-header": (
        "text/html; charset=KOI8-R",
        page("<meta charset='windows-1251'><title>koi8</title>", f"<p>{HELLO}</p>").encode("koi8-r"),
    ),
    # No charset anywhere: the bytes go to trafilatura, which detects windows-1251 in a long text.
    "/cp1251-undeclared": (
        "text/html",
        page("<title>Москва</title>", "".join(f"<p>{MOSCOW} Абзац {i}.</p>" for i in range(1, 4))).encode("cp1251"),
    ),
    # Plain text follows its header too.
    "/koi8.txt": ("text/plain; charset=koi8-r", f"{HELLO}\n".encode("koi8-r")),
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        kind, body = PAGES[self.path]
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def legacy_site() -> Iterator[str]:
    with serving(_Handler) as url:
        yield url


def extract(make_web: MakeWeb, url: str) -> dict[str, Any]:
    return extract_one(make_web(), url)


def test_charset_only_in_meta(make_web: MakeWeb, legacy_site: str) -> None:
    page = extract(make_web, legacy_site + "/cp1251-meta")
    assert page["title"] == "Москва"
    assert MOSCOW in page["content"]


def test_short_page_with_charset_only_in_meta(make_web: MakeWeb, legacy_site: str) -> None:
    page = extract(make_web, legacy_site + "/cp1251-short")
    assert page["title"] == "Привет" and HELLO in page["content"]


def test_http_equiv_latin1_reads_as_windows_1252(make_web: MakeWeb, legacy_site: str) -> None:
    page = extract(make_web, legacy_site + "/latin1-http-equiv")
    assert page["title"] == "Café"
    assert "Le café crème et la “brûlée” sont très appréciés à Paris" in page["content"]


def test_header_charset_wins(make_web: MakeWeb, legacy_site: str) -> None:
    page = extract(make_web, legacy_site + "/koi8-header")
    assert HELLO in page["content"]


def test_undeclared_charset_is_detected(make_web: MakeWeb, legacy_site: str) -> None:
    page = extract(make_web, legacy_site + "/cp1251-undeclared")
    assert MOSCOW in page["content"]


def test_plain_text_follows_its_header(make_web: MakeWeb, legacy_site: str) -> None:
    page = extract(make_web, legacy_site + "/koi8.txt")
    assert page["content"] == f"{HELLO}\n"
