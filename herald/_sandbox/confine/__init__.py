"""confine."""
