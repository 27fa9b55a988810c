"""Entry points: the ``slonkd`` command and its subcommands."""
