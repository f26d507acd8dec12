"""The file tools' core: read_file / write_file / patch, OS-level access checked on what was opened."""
