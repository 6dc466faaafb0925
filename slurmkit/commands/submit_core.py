"""What `slurmkit render` and `slurmkit submit` do, without click: the click commands (commands/submit.py) and the
lean entry (slurmkit/entry.py, which skips click's import for the common command lines) both run these. The entry
also passes `store`, the submission cache's entry for this command line (slurmkit/jobs/submitcache.py), and tries
`from_cache` first."""

from __future__ import annotations

import sys
from collections.abc import Callable


def _print(msg, err: bool = False) -> None:
    print(msg, file=sys.stderr if err else sys.stdout, flush=err)


def render_main(ctx, spec_path: str, sets, *, store: str | None = None) -> None:
    from ..jobs.pipeline import build

    spec, r = build(spec_path, ctx.settings, sets, say=ctx.say)
    if store:
        from ..jobs import submitcache

        submitcache.put(store, spec, r, ctx.settings)
    sys.stdout.write(r.script)


def submit_main(
    ctx,
    spec_path: str,
    sets,
    *,
    dry_run: bool,
    as_json: bool,
    no_check: bool,
    echo: Callable[..., None] = _print,
    store: str | None = None,
) -> None:
    from ..jobs.pipeline import background, build

    check = ctx.settings.submit.check_cluster and not no_check
    backend = ctx.backend()
    nodes = background(backend.nodes) if check else None  # sinfo runs while the spec is read and rendered
    spec, r = build(spec_path, ctx.settings, sets, nodes=nodes, say=ctx.say)
    if store:
        from ..jobs import submitcache

        submitcache.put(store, spec, r, ctx.settings)
    _finish(backend, r.script, dry_run=dry_run, as_json=as_json, echo=echo)


def _finish(backend, script: str, *, dry_run: bool, as_json: bool, echo) -> None:
    if dry_run:
        if as_json:
            from ..output import emit_json

            emit_json({"job_id": None, "dry_run": True, "script": script})
        else:
            echo("dry run: would submit with `sbatch --parsable` (script on stdin):", err=True)
            sys.stdout.write(script)
        return
    job_id = backend.submit(script)
    if as_json:
        from ..output import emit_json

        emit_json({"job_id": job_id, "script": script})
    else:
        echo(job_id)


def from_cache(
    store: str | None,
    cmd: str,
    spec_path: str,
    *,
    dry_run: bool = False,
    as_json: bool = False,
    no_check: bool = False,
    echo: Callable[..., None] = _print,
) -> bool:
    """Run the command from the submission cache's entry: True when done, False when there is none or the
    cluster check refuses the request (the caller then runs the full path, which says why in its own words)."""
    from types import SimpleNamespace

    from ..errors import UsageError
    from ..jobs import submitcache

    e = submitcache.get(store)
    if e is None:
        return False
    if cmd == "render":
        sys.stdout.write(e["script"])
        return True
    from .. import slurm

    backend = slurm.get_backend(SimpleNamespace(slurm=SimpleNamespace(**e["slurm"])))
    if e["check_cluster"] and not no_check:
        from ..jobs.check import check_request

        c = e["check"]
        spec = SimpleNamespace(
            source=spec_path,
            partition=c["spec_partition"],
            nodes=c["nodes"],
            gpus_per_node=c["gpus_per_node"],
            error=lambda key, msg: UsageError(msg),
        )
        try:
            check_request(spec, c["partition"], c["cpus_per_node"], backend.nodes())
        except UsageError:
            return False
    _finish(backend, e["script"], dry_run=dry_run, as_json=as_json, echo=echo)
    return True
