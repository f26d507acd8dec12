"""The code that runs inside the sandbox, as one package that Herald imports too.

    wire/framing.py    length-prefixed JSON frames (both ends of every link)
    wire/frames.py      the wire contract: every frame of every channel as a type (Literal tags)
    wire/guards.py        its reading: each channel's guard (frame -> typed frame or FrameError), encode_op
    wire/grant.py       a run's grant of the calls answered next to the script, as types, and its guard
    beside/budget.py      a run's call budget (CallBudget), as each process that counts it keeps it
    beside/answer.py      one call answered next to the script: bind, run, record
    child/client.py      the script's side of tool calls (hermes_tools calls it)
    child/helpers.py     parallel, json_parse, shell_quote, retry (exported by hermes_tools)
    procs/trees.py       process trees from /proc: find, signal, stop them
    procs/child.py       a sandbox child process, spawned or forked: its pipes, wait, reap (host and backend)
    procs/forking.py     the fork server's clients' side: the fork request, its answer, exits, reaps
    shell/guard.py  the local shell's parent: dies with Herald, kills what the shell left
    procs/environ.py     the environment policy: what code the model controls may see of ours
    child/bootstrap.py   a sandbox child: wait for a script, run it, report
    child/zygote.py      the fork server: forks sandbox children from a pre-imported interpreter
                   (for Herald in host mode, for every run's supervisor in the backend)
    supervisor/loop.py  in-backend execution, the backend's side: starts the child there and
                   multiplexes its output, control and tool calls over one exec channel
    supervisor/scriptproc.py  which way the supervisor's child starts: forked by the backend's zygote, or spawned
    supervisor/sinks.py       the supervisor's non-blocking write queues and tool-call connections
    beside/localtools.py  the tool calls the supervisor answers itself, from the run's grant
    beside/workers.py   their workers (imported once a run starts: the supervisor starts as fast as before)
    toolcore/textfiles.py   read_file / write_file / patch: the one core Herald's tools and the supervisor run
    toolcore/fuzzy.py       patch's matching: exact, then forgiving whitespace and indentation
    toolcore/base.py    ToolError, the argument check against a tool's schema, transcript previews
    toolcore/fileaccess.py  OS-level reads and writes (the local backend's, the supervisor's), the reader's rules
    toolcore/callroots.py where a file tool may act (workspace roots, masks), checked on what it opened
    toolcore/resolve.py   where a path leads, symlinks followed (Herald's policy, the grants' root checks)
    child/selfserve.py   host mode: the file reads a script's own process answers from its run's grant
    child/stubcache.py   the zygote's one import of each sandbox directory's hermes_tools
    shell/script.py the persistent shell's protocol (Herald's shells and the supervisor's)
    confine/readonly.py    read-only `terminal`: the bwrap command line, its socket policy, the probe
    confine/seccomp.py     the seccomp assembler (classic BPF, per architecture) and the Landlock
                   fallback's socket policy

Herald imports these modules as `herald._sandbox.X`: the RPC server and the host's side of
the sandbox use the same frames, and stopping a process tree or scrubbing an environment is
the same code everywhere. Shipping them is a plain copy: every file of this folder goes,
unchanged, into one directory as the package `_hermes_runtime` (runtime/sandbox/sandboxdir.py,
`write_runtime_package`): once per process here, linked from each host-mode sandbox directory
next to its generated `hermes_tools.py`, and into each backend's sandbox directory.

So every file here keeps to these rules:
- the standard library only, and never `herald` (it is not importable in the sandbox);
- imports between these files are relative (`from .protocol import encode_frame`), which
  works under either package name;
- Python >= 3.8 syntax and semantics: `from __future__ import annotations` in every module,
  and `typing` forms (`Dict[str, Any]`, `Optional[int]`) wherever a type is evaluated at run
  time; no `match`, no parenthesised context managers, no 3.9+ stdlib functions.
"""
