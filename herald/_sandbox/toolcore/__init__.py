"""toolcore."""
