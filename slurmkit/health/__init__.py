"""GPU health checks: capture -> parse -> decide, one check per module under `checks/`.

    from slurmkit.health.runner import run_checks
    report = run_checks(settings, "prolog", job_gpus=[0, 1])
    report.healthy, report.results, report.to_dict()

Parsers (`nvsmi`, `kernlog`, `nccl`, `nvlink`) are pure functions over text; each check's `evaluate` is a pure
function of parsed data and the settings; only `runner` runs commands (through slurmkit.proc, with timeouts).
Light on purpose: the prolog imports this package.
"""
