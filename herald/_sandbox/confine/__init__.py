"""What confines a script: bwrap's command line and probe, Landlock, seccomp filters, the read-only terminal."""
