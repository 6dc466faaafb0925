"""slurmkit: make Slurm GPU clusters safe and cheap to run."""
__version__ = "0.1.0"
