"""Process trees (find, signal, kill, reap), directories named after their owner process, the environment policy."""
