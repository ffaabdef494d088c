"""Engines: where tasks run (local processes by default; Slurm)."""
