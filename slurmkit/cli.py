"""The `slurmkit` command. Each subcommand is a thin function over the packages; heavy imports stay inside them.

Exit codes: 0 success/healthy, 1 unhealthy or an operation failed, 2 bad usage or bad input.
"""
from __future__ import annotations

import sys

import click

from . import __version__
from .errors import SlurmkitError


class Ctx:
    def __init__(self, config: str | None, verbose: int):
        self.config_arg = config
        self.verbose = verbose
        self._settings = None

    @property
    def settings(self):
        if self._settings is None:
            from . import config
            self._settings = config.load(self.config_arg)
        return self._settings

    def say(self, msg: str) -> None:
        if self.verbose:
            click.echo(f"slurmkit: {msg}", err=True)

    def backend(self):
        from . import slurm
        return slurm.get_backend(self.settings, verbose=self.say if self.verbose else None)


pass_ctx = click.make_pass_decorator(Ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--config", "config", metavar="FILE",
              help="Site config (default: $SLURMKIT_CONFIG, else /etc/slurmkit/config.yaml).")
@click.option("-v", "--verbose", count=True, help="Say more on stderr.")
@click.version_option(__version__, prog_name="slurmkit")
@click.pass_context
def cli(ctx, config, verbose):
    """Make Slurm GPU clusters safe and cheap to run."""
    ctx.obj = Ctx(config, verbose)


@cli.command()
@click.argument("nodelist", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (see README for the format).")
@pass_ctx
def nodes(ctx: Ctx, nodelist, as_json):
    """Nodes with their state, GPUs (used/total) and reason (who set it, when). NODELIST is a hostlist."""
    recs = ctx.backend().nodes(nodelist)
    if as_json:
        from .output import emit_json
        emit_json({"nodes": [r.to_dict() for r in recs]})
        return
    from .output import table
    rows = []
    for r in recs:
        reason = r.reason
        if reason and (r.reason_user or r.reason_time):
            reason += f" [{r.reason_user or '?'}@{r.reason_time or '?'}]"
        rows.append([r.name, r.state_text.lower(), f"{r.gpus_used}/{r.gpus_total}", reason])
    click.echo(table(rows, ["NODE", "STATE", "GPUS", "REASON"]))


def main(argv=None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="slurmkit", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.ClickException as e:
        e.show()
        sys.exit(2 if e.exit_code not in (0, 1) else e.exit_code or 2)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except SlurmkitError as e:
        click.echo(f"slurmkit: error: {e}", err=True)
        sys.exit(e.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
