"""beside."""
