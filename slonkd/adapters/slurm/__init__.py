"""SLURM adapter: scontrol/sinfo (and optionally pyslurm) behind a typed interface."""
