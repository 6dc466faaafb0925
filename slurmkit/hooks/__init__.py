"""Entry points Slurm runs through prolog/prolog and epilog/epilog: light imports (no click, jinja2, paramiko),
fast start. `common.run_hook` is the shared shape: checks -> drain on failure (the etiquette) -> health log."""
