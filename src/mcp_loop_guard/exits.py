"""The guard's exit statuses, shared by the command line and its subcommands."""

EXIT_START_FAILED = 1
"""The upstream could not be started (stdio)."""
EXIT_USAGE = 2
"""Bad usage or settings: one line on stderr says which."""
