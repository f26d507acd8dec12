"""search_files: ripgrep or the Python engine over one held directory, globs and ignore files alike."""
