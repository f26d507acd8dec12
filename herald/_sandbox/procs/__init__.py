"""procs."""
