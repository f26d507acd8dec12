"""Host mode: the script's process on this machine (spawned, or forked by the zygote)."""
