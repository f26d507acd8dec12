"""The script's process: its bootstrap, the tool-call client, the helpers hermes_tools exports, and the zygote that forks it."""
