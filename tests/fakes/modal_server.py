"""A local gRPC server that speaks Modal's control-plane API (the `ModalClient` service from the
modal_proto definitions shipped in the modal package) and refuses every request, as Modal does
for bad credentials. Driven through the real SDK (MODAL_SERVER_URL=http://127.0.0.1:PORT).

It does not run sandboxes: a fake that does would also have to serve the task command router and
emulate the in-sandbox file tool; see the README's Modal section for what stays untested.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from grpclib import GRPCError, Status
from grpclib.server import Server
from modal_proto import api_grpc

REFUSAL = "Token ID is malformed or does not exist (fake Modal server)"


def _refuse(method: str) -> Any:
    async def handler(stream: Any) -> None:
        calls.append(method)
        await stream.recv_message()
        raise GRPCError(Status.UNAUTHENTICATED, REFUSAL)

    return handler


calls: list[str] = []  # methods the SDK called, in order


def _refusing_service() -> Any:
    """A ModalClientBase with every RPC implemented as a refusal."""
    names = sorted(api_grpc.ModalClientBase.__abstractmethods__)
    methods = {name: staticmethod(_refuse(name)) for name in names}
    return type("RefusingModal", (api_grpc.ModalClientBase,), methods)()


class RefusingModalServer:
    """`with RefusingModalServer() as url:` a ModalClient gRPC endpoint on 127.0.0.1."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: Server | None = None
        self.port = 0

    def __enter__(self) -> str:
        self.thread.start()

        async def start() -> None:  # made on the loop that serves it
            self.server = Server([_refusing_service()])
            await self.server.start("127.0.0.1", 0)

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        assert self.server is not None and isinstance(self.server._server, asyncio.Server)
        self.port = self.server._server.sockets[0].getsockname()[1]  # the port the OS chose
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self.server is not None
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
