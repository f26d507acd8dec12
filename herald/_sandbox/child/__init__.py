"""The script's process: its bootstrap, the tool-call client, hermes_tools' helpers, the zygote."""
