"""The sbatch templates: where they are looked up (site directories first, then the built-in ones), Jinja's
environment (StrictUndefined, compiled templates cached in the user's private cache), and template errors named by
file and line."""

from __future__ import annotations

import os
import shlex

from ..errors import UsageError
from .spec import JobSpec


def _builtin_dir() -> str:
    """templates/sbatch in a source checkout (or editable install); <prefix>/share/slurmkit/templates/sbatch where
    a wheel installed them (pyproject data-files)."""
    here = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "templates", "sbatch"
    )
    if os.path.isdir(here):
        return here
    import sys

    return os.path.join(sys.prefix, "share", "slurmkit", "templates", "sbatch")


BUILTIN_DIR = _builtin_dir()
TEMPLATES = {"single": "single.sbatch.j2", "torchrun": "torchrun.sbatch.j2", "sweep": "sweep.sbatch.j2"}


# --- templates -----------------------------------------------------------------------------------------------------


def template_dirs(settings, extra_dir: str | None = None) -> list[str]:
    """Where templates are looked up, first match wins: the spec's own template dir, the site's, the built-in."""
    dirs = []
    if extra_dir:
        dirs.append(extra_dir)
    for d in settings.submit.template_dirs:
        p = os.path.expanduser(d)
        if not os.path.isabs(p) and settings.source:
            p = os.path.join(os.path.dirname(os.path.realpath(settings.source)), p)
        dirs.append(p)
    dirs.append(BUILTIN_DIR)
    return dirs


def _environment(settings, extra_dir: str | None = None):
    import jinja2

    dirs = template_dirs(settings, extra_dir)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(dirs),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    return env, dirs


def _bytecode_cache():
    """Compiled templates in the user's private cache (slurmkit/files.py: never a directory another user can
    write, since a bytecode entry is code that runs): parsing and compiling the templates is a good part of a
    submit's start-up. Jinja checks each entry against the template source's checksum, so an edited template is
    never served stale. No cache (and no error) where there is no private directory."""
    import jinja2

    from ..files import cache_dir

    d = cache_dir("jinja")
    return jinja2.FileSystemBytecodeCache(d) if d else None


def template_below_spec(spec: JobSpec, t: str) -> tuple[str, str]:
    """A `template:` path: relative to the spec's directory and inside it, links resolved (a spec must not make
    slurmkit, perhaps run by root, print /etc/shadow). Returns (its directory, its file name)."""
    base = os.path.dirname(os.path.realpath(spec.source)) if spec.source else os.getcwd()
    if os.path.isabs(t) or t.startswith("~") or ".." in t.split("/"):
        raise spec.error(
            "template",
            f"{t!r}: a template is a name from the template search path or a path "
            "below the spec's directory (no absolute path, no ..)",
        )
    real = os.path.realpath(os.path.join(base, t))
    if os.path.commonpath([real, base]) != base:
        raise spec.error("template", f"{t!r} leads outside the spec's directory {base} (a symbolic link?)")
    return os.path.dirname(real), os.path.basename(real)


def render_template(settings, tname: str, ctx: dict, *, extra_dir=None, spec=None) -> str:
    import jinja2

    env, dirs = _environment(settings, extra_dir)
    try:
        return env.get_template(tname).render(**ctx)
    except jinja2.TemplateNotFound as e:
        where = {}
        if spec is not None and spec.template:
            where = {"path": spec.source, "line": spec.lines.get("template")}
        raise UsageError(f"template {e.name!r} not found in {', '.join(dirs)}", **where) from None
    except jinja2.TemplateSyntaxError as e:
        raise UsageError(f"template error: {e.message}", path=e.filename or e.name or tname, line=e.lineno) from None
    except jinja2.TemplateError as e:
        path, line = _template_frame(e, tname)
        raise UsageError(f"template error: {e}", path=path, line=line) from None


def _template_frame(exc: BaseException, default: str) -> tuple[str, int | None]:
    """The innermost template file and line in a Jinja traceback (Jinja rewrites frames to template lines)."""
    import traceback

    found: tuple[str, int | None] = (default, None)
    for fr in traceback.extract_tb(exc.__traceback__):
        if fr.filename.endswith(".j2") or "/templates/" in fr.filename:
            found = (fr.filename, fr.lineno)
    return found
