"""Every frame type Herald and its sandbox processes exchange, by channel. A frame is a JSON object
(protocol.py); its `type` (`op` on the fork server's socket) is one of these names.

RPC socket (script -> Herald; replies carry the call's `id` and `result` or `error`):
    AUTH      {"type": AUTH, "token"}                          first frame of every connection

Control pipe of a sandbox child (bootstrap.py -> Herald):
    READY     {"type": READY, "pid"}                           it can take a run
    DONE      {"type": DONE, "exit_code"}                      a kernel cell finished
    EXIT      {"type": EXIT, "exit_code"}                      the script is over, the process goes
    EOF       (made up by the reader when the pipe closes)

Exec channel of in-backend runs (Herald <-> supervisor.py):
    PREPARE   {"type": PREPARE, "env", "loader", "fork_server"}  Herald: start the script interpreter
              (fork_server: the backend zygote's socket path, or null to spawn)
    START     {"type": START, "mode", "cwd", "code"|"sentinel", "line_buffered"}
    CODE      {"type": CODE, "code", "line_buffered"}          the next kernel cell
    KILL      {"type": KILL, "grace"}                          SIGTERM the tree, SIGKILL after grace
    CLOSE     {"type": CLOSE}                                  SIGKILL the tree and leave
    OUT, ERR  {"type": OUT|ERR, "data"}                        the script's output (latin-1 text)
    READY, DONE, EXIT as on the control pipe; FAILED {"type": FAILED, "error"}: the supervisor broke

Fork server socket (client <-> zygote.py), key "op"; the client is Herald in host mode, a
run's supervisor (scriptproc.py) in the backend:
    FORK      {"op": FORK, "sandbox_dir"} + fds                 client: a child, please
    FORKED    {"op": FORKED, "pid"} or ERROR {"op": ERROR, "message"}
    EXIT      {"op": EXIT, "pid", "status"}                     a forked child exited
    REAP      {"op": REAP, "pid"}                               the client is done with that pid
    READY     {"op": READY}                                     host mode: once, after the pre-imports

Stdlib only, Python >= 3.8, like the rest of this package.
"""

from __future__ import annotations

AUTH = "auth"
READY = "ready"
DONE = "done"
EXIT = "exit"
EOF = "eof"
PREPARE = "prepare"
START = "start"
CODE = "code"
KILL = "kill"
CLOSE = "close"
OUT = "out"
ERR = "err"
FAILED = "failed"
FORK = "fork"
FORKED = "forked"
REAP = "reap"
ERROR = "error"
