"""What `slurmkit render` and `slurmkit submit` do, without click: the click commands (commands/submit.py) and the
lean entry (slurmkit/entry.py, which skips click's import for the common command lines) both run these."""
from __future__ import annotations

import sys
from collections.abc import Callable


def _print(msg, err: bool = False) -> None:
    print(msg, file=sys.stderr if err else sys.stdout, flush=err)


def render_main(ctx, spec_path: str, sets) -> None:
    from ..jobs.pipeline import build
    _, r = build(spec_path, ctx.settings, sets, say=ctx.say)
    sys.stdout.write(r.script)


def submit_main(ctx, spec_path: str, sets, *, dry_run: bool, as_json: bool, no_check: bool,
                echo: Callable[..., None] = _print) -> None:
    from ..jobs.pipeline import background, build
    check = ctx.settings.submit.check_cluster and not no_check
    backend = ctx.backend()
    nodes = background(backend.nodes) if check else None   # sinfo runs while the spec is read and rendered
    _, r = build(spec_path, ctx.settings, sets, nodes=nodes, say=ctx.say)
    if dry_run:
        if as_json:
            from ..output import emit_json
            emit_json({"job_id": None, "dry_run": True, "script": r.script})
        else:
            echo("dry run: would submit with `sbatch --parsable` (script on stdin):", err=True)
            sys.stdout.write(r.script)
        return
    job_id = backend.submit(r.script)
    if as_json:
        from ..output import emit_json
        emit_json({"job_id": job_id, "script": r.script})
    else:
        echo(job_id)
