"""The `slurmkit` command. Each subcommand is a thin function over the packages; heavy imports stay inside them.

Exit codes: 0 success/healthy, 1 unhealthy or an operation failed, 2 bad usage or bad input, 3 could not find out
(Slurm or a tool did not answer: errors.NoAnswer).
"""

from __future__ import annotations

import sys

import click

from . import __version__
from .commands.ctx import Ctx
from .errors import SlurmkitError


# Subcommands load lazily: `slurmkit submit` must not pay for paramiko, nor the prolog for jinja2.
# name -> "module:attribute"; each module holds one command (or group), a thin layer over the packages.
COMMANDS = {
    "audit": "slurmkit.commands.audit:audit",
    "nodes": "slurmkit.commands.nodes:nodes",
    "topo": "slurmkit.commands.topo:topo",
    "fabric": "slurmkit.commands.fabric:fabric",
    "sync": "slurmkit.commands.sync:sync",
    "render": "slurmkit.commands.submit:render_cmd",
    "submit": "slurmkit.commands.submit:submit",
    "install": "slurmkit.commands.install:install",
    "run": "slurmkit.commands.run:run",
    "check": "slurmkit.commands.check:check",
    "health": "slurmkit.commands.health:health",
    "efficiency": "slurmkit.commands.efficiency:efficiency",
    "report": "slurmkit.commands.report:report",
    "jobs": "slurmkit.commands.jobs:jobs",
    "logs": "slurmkit.commands.logs:logs",
    "cancel": "slurmkit.commands.cancel:cancel",
    "config": "slurmkit.commands.config:config_cmd",
    "agent": "slurmkit.commands.agent:agent",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        import importlib

        mod, attr = target.split(":")
        cmd = getattr(importlib.import_module(mod), attr)
        _accept_verbose(cmd)
        return cmd


def _more_verbose(ctx, param, value):
    if value:
        obj = ctx.find_object(Ctx)
        if obj is not None:
            obj.verbose += value


def _accept_verbose(cmd: click.Command) -> None:
    """`slurmkit render X -v` as `slurmkit -v render X`: every subcommand takes -v/--verbose too (once)."""
    if not any("-v" in p.opts or "--verbose" in p.opts for p in cmd.params):
        cmd.params.append(
            click.Option(
                ["-v", "--verbose"],
                count=True,
                expose_value=False,
                callback=_more_verbose,
                help="Say more on stderr (as `slurmkit -v`).",
            )
        )
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _accept_verbose(sub)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option(
    "--config",
    "config",
    metavar="FILE",
    help="Site config (default: $SLURMKIT_CONFIG, else /etc/slurmkit/config.yaml).",
)
@click.option("-v", "--verbose", count=True, help="Say more on stderr.")
@click.version_option(__version__, prog_name="slurmkit")
@click.pass_context
def cli(ctx, config, verbose):
    """Make Slurm GPU clusters safe and cheap to run."""
    ctx.obj = Ctx(config, verbose, echo=lambda m: click.echo(m, err=True))


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
    # `python -m slurmkit.cli` loads this file as __main__, a second copy of it: run the one real module's main
    from slurmkit.cli import main as _main

    _main()
