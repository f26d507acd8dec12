"""How a captured stream is cut to a limit: a head and a tail around a marker that says what was
left out. One implementation for Herald's CappedCapture (herald/capture.py) and the supervisor's
terminal (shell/localshell.py), so both give the same text. Stdlib only, Python >= 3.8.
"""

from __future__ import annotations

HEAD_SHARE = 0.4


def cut_text(head: bytes, tail: bytes, total: int, head_size: int, tail_size: int, what: str, where: str) -> str:
    """The text shown for a stream of `total` bytes past its limit: at most `head_size` bytes of
    `head` and `tail_size` of `tail`, no character split, and the marker (`where`: the spill file)."""
    head = cut_utf8(head, head_size, from_end=False)
    tail = cut_utf8(tail, tail_size, from_end=True)
    omitted = total - len(head) - len(tail)
    marker = "\n[... %s truncated: %s bytes in all, %s bytes omitted between the first %s and the last %s%s ...]\n" % (
        what, format(total, ","), format(omitted, ","), format(len(head), ","), format(len(tail), ","), where
    )
    return head.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace")


def capped_text(data: bytes, limit: int, what: str, where: str) -> str:
    """`data` as CappedCapture(limit) shows it once all of it was fed (`where`: the spill note)."""
    limit = max(0, limit)
    if len(data) <= limit:
        return data.decode("utf-8", "replace")
    head_size = int(limit * HEAD_SHARE)
    tail_size = limit - head_size
    return cut_text(
        data[:head_size],
        data[len(data) - tail_size :] if tail_size else b"",
        len(data),
        head_size,
        tail_size,
        what,
        where,
    )


def cut_utf8(data: bytes, size: int, from_end: bool) -> bytes:
    """At most `size` bytes of `data` (its end if `from_end`) without a split UTF-8 character
    at the cut: a partial character there is dropped rather than shown as U+FFFD."""
    if from_end:
        piece = data[len(data) - size :] if size else b""
        skip = 0
        while skip < len(piece) and skip < 3 and (piece[skip] & 0xC0) == 0x80:
            skip += 1
        return piece[skip:]
    piece = data[:size]
    lead = len(piece) - 1
    while lead >= 0 and len(piece) - lead <= 3 and (piece[lead] & 0xC0) == 0x80:
        lead -= 1
    if lead >= 0 and piece[lead] >= 0xC0:
        need = 2 if piece[lead] < 0xE0 else 3 if piece[lead] < 0xF0 else 4
        if len(piece) - lead < need:
            return piece[:lead]
    return piece
