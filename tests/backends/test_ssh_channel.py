"""An SSH exec channel used from two threads, as in-backend execution does: one reads output
with short waits (or none) while another sends large replies. A send that has to wait for the
peer's window must not give up because of the reader's wait (herald/backends/ssh/channel.py)."""

from __future__ import annotations

import threading
from typing import Any

SIZE = 6 << 20  # three times paramiko's default window: the sender waits for it to reopen


def test_a_large_send_while_another_thread_reads_arrives_whole(ssh_backend: Any) -> None:
    channel = ssh_backend.open_channel(["head", "-c", str(SIZE)])  # echoes SIZE bytes, then exits
    received: list[bytes] = []

    def read() -> None:
        while True:
            chunk = channel.recv(0.002)  # short waits: the reader keeps setting its own
            if chunk == b"":
                return
            if chunk:
                received.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        channel.send(b"x" * SIZE)
    finally:
        reader.join(120)
        channel.close()
    output = b"".join(received)
    assert len(output) == SIZE and output == b"x" * SIZE, len(output)
