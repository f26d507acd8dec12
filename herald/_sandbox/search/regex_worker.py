"""Match search_files' regex against text in a process of its own (started by search/pyengine.py).

A regex with nested repeats (`(a+)+$`) can take exponential time, and Python's `re` holds the
GIL while it runs: inside Herald (or a backend's supervisor) it would stall every thread, the
timers that end a run included. Here it runs in a process of its own, which the searcher kills
when the search's time is up. Stdlib only, Python >= 3.8, run as a script (`python -I -S
search/regex_worker.py`), never imported: importing the herald package would cost more than most
searches.

Protocol, bytes on stdin and stdout:
    Herald -> worker   b"<n>\\n" + the pattern, n bytes of UTF-8 (lone surrogates passed through)
    Herald -> worker   per file: b"<n> <most>\\n" + n bytes of UTF-8, the file's lines joined by \\n
    worker -> Herald   per file: the numbers (from 1) of the first `most` matching lines, b" "
                       between them, ending in b"\\n"
The worker exits when its stdin ends.
"""

from __future__ import annotations

import re
import sys


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    regex = re.compile(stdin.read(int(stdin.readline())).decode("utf-8", "surrogatepass"))
    while True:
        header = stdin.readline()
        if not header:
            return
        size, most = (int(field) for field in header.split())
        found = []
        for number, line in enumerate(stdin.read(size).decode("utf-8", "surrogatepass").split("\n"), 1):
            if regex.search(line):
                found.append(str(number))
                if len(found) >= most:
                    break
        stdout.write((" ".join(found) + "\n").encode("ascii"))
        stdout.flush()


if __name__ == "__main__":
    main()
