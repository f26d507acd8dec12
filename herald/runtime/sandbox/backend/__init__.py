"""Backend mode: the script's process inside the backend, behind the SandboxChild contract."""
