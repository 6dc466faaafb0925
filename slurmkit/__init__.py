"""slurmkit: make Slurm GPU clusters safe and cheap to run.

The Python API (slurmkit.api, loaded on first use: `import slurmkit` stays light for the prolog/epilog):

    import slurmkit
    job = slurmkit.submit("job.yaml", nodes=2)     # -> Job (int(job): the job id); slurmkit.render(...) -> the script
    job.wait(); job.state(); job.exit_code; slurmkit.list_jobs(name="x"); slurmkit.as_completed([...])
"""

__version__ = "0.1.0"

# name -> module holding it; imported on first access (PEP 562), so the hooks' `import slurmkit.x` pulls nothing
_LAZY = {
    "submit": "slurmkit.api",
    "render": "slurmkit.api",
    "refresh": "slurmkit.api",
    "Client": "slurmkit.api",
    "Job": "slurmkit.jobs.handle",
    "list_jobs": "slurmkit.api",
    "as_completed": "slurmkit.jobs.handle",
    "SlurmUnavailable": "slurmkit.jobs.handle",
    "JobGone": "slurmkit.jobs.handle",
    "SlurmkitError": "slurmkit.errors",
    "UsageError": "slurmkit.errors",
    "SpecError": "slurmkit.errors",
    "CommandError": "slurmkit.errors",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'slurmkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
