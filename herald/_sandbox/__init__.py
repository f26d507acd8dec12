"""The code that runs next to the script, as one package that Herald imports too.

By role (ARCHITECTURE.md has the map; import-linter keeps the layers, top to bottom):
    supervisor/  backend mode: starts the script there, carries its output, control and calls
    child/       the script's process: bootstrap, the tool-call client, helpers, the zygote
    beside/      calls answered beside the script: the grant as taken, the one call counter,
                 answer_call, the supervisor's routing and workers
    search/      search_files' two engines;  shell/  the persistent shell
    toolcore/    read_file / write_file / patch, OS-level file access, a call's roots
    confine/     bwrap, Landlock, seccomp, the read-only terminal
    procs/       process trees, and a sandbox child spawned or forked (its pipes, wait, reap)
    wire/        every frame of every channel as a type, one guard per channel, the grant's types
    tcprelay.py  the backend's end of Backend.open_tcp (Docker, Modal)
    snapshot/    the workspace snapshot engine (checkpoints, transactions), run where the workspace is

Herald imports these modules as `herald._sandbox.X`: the RPC server and the host's side of the
sandbox use the same frames, and stopping a process tree or scrubbing an environment is the same
code everywhere. Shipping them is a plain copy of this folder, as the package `_hermes_runtime`
(runtime/sandbox/sandboxdir.py `write_runtime_package`): once per process here, linked from each
host-mode sandbox directory next to its generated `hermes_tools.py`, and into each backend's
sandbox directory.

So every file here keeps to these rules:
- the standard library only, and never `herald` (it is not importable in the sandbox);
- imports between these files are relative (`from ..wire.framing import encode_frame`), which
  works under either package name;
- Python >= 3.8 syntax and semantics: `from __future__ import annotations` in every module,
  and `typing` forms (`Dict[str, Any]`, `Optional[int]`) wherever a type is evaluated at run
  time; no `match`, no parenthesised context managers, no 3.9+ stdlib functions.
"""
