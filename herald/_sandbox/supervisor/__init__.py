"""Backend mode's supervisor: starts the script in the backend and carries its output, control and calls."""
