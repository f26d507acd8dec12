"""The workspace snapshot engine: runs where the workspace is (stdlib only, Python >= 3.8).

Git-like and content-addressed, without git: `store.py` keeps objects by sha256, one manifest per
snapshot and a stat index (an unchanged file is stat'ed, never re-read); `scan.py` walks the
workspace on descriptors (no link is ever followed); `apply.py` puts a snapshot back, acting on
each opened directory; `engine.py` is the operations; `serve.py` is the same operations over a
pipe, for a backend that is not this machine (Herald's side: herald/checkpoints/).
"""
