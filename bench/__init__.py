"""Performance targets, measured and printed as a table by `make bench` (not timed tests)."""
