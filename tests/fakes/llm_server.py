"""A local stand-in for LLM APIs: OpenAI Chat Completions and Anthropic Messages on one port.

It speaks both wire protocols as the official SDKs expect them — JSON responses and SSE streams,
tool calls in both directions, errors in each API's own shape — and replays scripted model
turns, protocol-neutral, so one script drives either provider:

    server = FakeLLMServer([calls(call("read_file", path="a.py")), reply("done")])
    openai.OpenAI(base_url=server.openai_base_url, api_key="k")       # POST /v1/chat/completions
    anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="k")  # POST /v1/messages

Each request takes the next scripted `Turn` (an error turn answers with its HTTP status); when the
script is used up, `strategy(request)` decides (scripted models that react to tool results), else
the reply is the text "SCRIPT EXHAUSTED". Every request is recorded (`server.requests`) with its
raw body, headers and helpers to read the conversation in either protocol.
"""

from __future__ import annotations

import email.utils
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Protocol = Literal["openai", "anthropic"]
EXHAUSTED = "SCRIPT EXHAUSTED"


@dataclass
class FakeToolCall:
    name: str
    arguments: dict[str, Any] | str  # a str is sent as is (it may be malformed JSON)
    id: str | None = None

    def raw_arguments(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class Turn:
    text: str = ""
    tool_calls: list[FakeToolCall] = field(default_factory=list)
    status: int = 200  # anything else: an error response in the protocol's shape
    error_message: str = ""
    error_type: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the response starts
    stall: float = 0.0  # streaming: seconds to hang after the first text chunk


def reply(text: str, **kwargs: Any) -> Turn:
    return Turn(text=text, **kwargs)


def call(name: str, _raw: str | None = None, **arguments: Any) -> FakeToolCall:
    """A tool call with these arguments, or with the raw argument text `_raw` (malformed JSON)."""
    return FakeToolCall(name, _raw if _raw is not None else arguments)


def calls(*tool_calls: FakeToolCall, text: str = "", **kwargs: Any) -> Turn:
    return Turn(text=text, tool_calls=list(tool_calls), **kwargs)


def error(status: int, message: str, *, kind: str = "", headers: dict[str, str] | None = None) -> Turn:
    """An error response; `headers` such as {"retry-after": "2"} or {"x-should-retry": "false"}."""
    return Turn(status=status, error_message=message, error_type=kind, headers=headers or {})


def http_date(seconds_from_now: float) -> str:
    """A Retry-After value in its HTTP-date form (whole seconds, GMT), as servers send it."""
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


@dataclass
class RecordedRequest:
    protocol: Protocol
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes

    @property
    def approx_tokens(self) -> int:
        """Request size in tokens, estimated as characters / 4 (no tokenizer is available here)."""
        return len(self.raw.decode("utf-8", "replace")) // 4

    @property
    def system(self) -> str:
        if self.protocol == "openai":
            first = self.body["messages"][0]
            return str(first["content"]) if first["role"] == "system" else ""
        system = self.body.get("system", "")
        return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body["messages"]
        return messages[1:] if self.protocol == "openai" and messages and messages[0]["role"] == "system" else messages

    @property
    def tool_names(self) -> list[str]:
        tools = self.body.get("tools") or []
        return [t["function"]["name"] if self.protocol == "openai" else t["name"] for t in tools]

    def tool_results(self) -> list[tuple[str, str]]:
        """(tool call id, content) of the results sent back in this request's last turn."""
        messages = self.messages
        out: list[tuple[str, str]] = []
        if self.protocol == "openai":
            for message in reversed(messages):
                if message["role"] != "tool":
                    break
                out.insert(0, (message["tool_call_id"], _text(message.get("content"))))
            return out
        last = messages[-1] if messages else {}
        content = last.get("content") if last.get("role") == "user" else None
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                out.append((block["tool_use_id"], _text(block.get("content"))))
        return out

    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message["role"] == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                texts = [b.get("text", "") for b in content or [] if b.get("type") == "text"]
                if texts:
                    return "\n".join(texts)
        return ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


Strategy = Callable[[RecordedRequest], Turn]


class FakeLLMServer:
    def __init__(self, turns: list[Turn] | None = None, *, strategy: Strategy | None = None) -> None:
        self._turns = list(turns or [])
        self.strategy = strategy
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        # shutdown() waits for the loop to notice, up to one poll: 0.05 s, not the default 0.5 s per test
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-llm", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def base_url(self, protocol: Protocol) -> str:
        return self.openai_base_url if protocol == "openai" else self.anthropic_base_url

    def script(self, *turns: Turn) -> None:
        with self._lock:
            self._turns.extend(turns)

    def wait_for_requests(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fake LLM server got {len(self.requests)} requests, expected {count}")
            time.sleep(0.01)

    def next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    def take_turn(self, request: RecordedRequest) -> Turn:
        with self._lock:
            self.requests.append(request)
            if self._turns:
                return self._turns.pop(0)
        return self.strategy(request) if self.strategy else reply(EXHAUSTED)

    def sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def close(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- wire formats ------------------------------------------------------------------------------


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or []


def _error_body(protocol: Protocol, turn: Turn) -> dict[str, Any]:
    if protocol == "openai":
        kind = turn.error_type or {401: "invalid_request_error", 429: "rate_limit_exceeded"}.get(
            turn.status, "api_error"
        )
        return {"error": {"message": turn.error_message, "type": kind, "param": None, "code": kind}}
    kind = turn.error_type or {
        400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
        413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error",
    }.get(turn.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": turn.error_message}}


def _usage_numbers(request: RecordedRequest, turn: Turn) -> tuple[int, int]:
    produced = len(turn.text) + sum(len(c.raw_arguments()) + len(c.name) for c in turn.tool_calls)
    return request.approx_tokens, max(1, produced // 4)


def _openai_json(server: FakeLLMServer, request: RecordedRequest, turn: Turn) -> dict[str, Any]:
    prompt, completion = _usage_numbers(request, turn)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": c.id or server.next_id("call_"), "type": "function",
             "function": {"name": c.name, "arguments": c.raw_arguments()}}
            for c in turn.tool_calls
        ]
    return {
        "id": server.next_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()),
        "model": request.body.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _openai_stream(server: FakeLLMServer, request: RecordedRequest, turn: Turn) -> Iterator[str]:
    prompt, completion = _usage_numbers(request, turn)
    base = {"id": server.next_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()),
            "model": request.body.get("model", "fake")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return (
            "data: " + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"
        )

    yield chunk({"role": "assistant", "content": ""})
    for n, piece in enumerate(_pieces(turn.text)):
        yield chunk({"content": piece})
        if n == 0 and turn.stall:
            server.sleep(turn.stall)
    for index, tool_call in enumerate(turn.tool_calls):
        call_id = tool_call.id or server.next_id("call_")
        yield chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                     "function": {"name": tool_call.name, "arguments": ""}}]})
        for piece in _pieces(tool_call.raw_arguments(), 40):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if turn.tool_calls else "stop")
    if (request.body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        yield "data: " + json.dumps({**base, "choices": [], "usage": usage}) + "\n\n"
    yield "data: [DONE]\n\n"


def _tool_input(tool_call: FakeToolCall) -> dict[str, Any]:
    if isinstance(tool_call.arguments, dict):
        return tool_call.arguments
    try:
        value = json.loads(tool_call.arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _anthropic_json(server: FakeLLMServer, request: RecordedRequest, turn: Turn) -> dict[str, Any]:
    prompt, completion = _usage_numbers(request, turn)
    content: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
    content += [{"type": "tool_use", "id": c.id or server.next_id("toolu_"), "name": c.name, "input": _tool_input(c)}
                for c in turn.tool_calls]
    return {
        "id": server.next_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.body.get("model", "fake"),
        "content": content,
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


def _anthropic_stream(server: FakeLLMServer, request: RecordedRequest, turn: Turn) -> Iterator[str]:
    prompt, completion = _usage_numbers(request, turn)

    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    yield event(
        "message_start",
        {
            "message": {
                "id": server.next_id("msg_"),
                "type": "message",
                "role": "assistant",
                "model": request.body.get("model", "fake"),
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": 1},
            }
        },
    )
    index = 0
    if turn.text:
        yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
        for n, piece in enumerate(_pieces(turn.text)):
            yield event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}})
            if n == 0 and turn.stall:
                server.sleep(turn.stall)
        yield event("content_block_stop", {"index": index})
        index += 1
    for tool_call in turn.tool_calls:
        block = {
            "type": "tool_use",
            "id": tool_call.id or server.next_id("toolu_"),
            "name": tool_call.name,
            "input": {},
        }
        yield event("content_block_start", {"index": index, "content_block": block})
        for piece in _pieces(tool_call.raw_arguments(), 40):
            yield event(
                "content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}
            )
        yield event("content_block_stop", {"index": index})
        index += 1
    yield event("message_delta", {"delta": {"stop_reason": "tool_use" if turn.tool_calls else "end_turn",
                                            "stop_sequence": None}, "usage": {"output_tokens": completion}})
    yield event("message_stop", {})


def _handler_for(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path.endswith("/chat/completions"):
                protocol: Protocol = "openai"
            elif path.endswith("/messages"):
                protocol = "anthropic"
            else:
                self._send_json(404, {"error": {"message": f"fake LLM server: no route {path}", "type": "not_found"}})
                return
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            request = RecordedRequest(
                protocol, path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw), raw
            )
            turn = server.take_turn(request)
            if turn.delay:
                server.sleep(turn.delay)
            try:
                self._respond(protocol, request, turn)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (an interrupt)
                pass

        def _respond(self, protocol: Protocol, request: RecordedRequest, turn: Turn) -> None:
            if turn.status != 200:
                self._send_json(turn.status, _error_body(protocol, turn), turn.headers)
                return
            if not request.body.get("stream"):
                body = (
                    _openai_json(server, request, turn)
                    if protocol == "openai"
                    else _anthropic_json(server, request, turn)
                )
                self._send_json(200, body)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.end_headers()
            events = _openai_stream if protocol == "openai" else _anthropic_stream
            for chunk in events(server, request, turn):  # a stall happens inside, after the first text
                self.wfile.write(chunk.encode())
                self.wfile.flush()

        def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler
