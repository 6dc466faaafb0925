"""The Python API: submit and render job specs from a driver script or a notebook.

    import slurmkit
    job = slurmkit.submit("job.yaml", nodes=2, env={"LR": "3e-4"}, preemption__signal_lead=60)
    job.wait(timeout=3600); job.state(); job.exit_code; job.tail(20)      # int(job) is the Slurm job id
    script = slurmkit.render({"command": ["python", "train.py"], "gpus_per_node": 8})
    for j in slurmkit.as_completed(slurmkit.list_jobs(name="sweep")): print(j.id, j.state())

The same path as `slurmkit submit` (slurmkit.jobs.pipeline.build): validation, templates, topology binding and the
check against the cluster. What does not change between submissions is kept for the life of the process: the site
config, the Slurm backend and the cluster's nodes (scontrol), so the 2nd..Nth submit costs the render and one sbatch.
`refresh()` forgets them (after the cluster changed: a node drained, a partition added).

Overrides are spec keys as keyword arguments; `__` reaches into a nested key (`preemption__signal_lead=60` is
`--set preemption.signal_lead=60`); a value is plain data (JSON-able) and is checked like a `--set` value.
Errors: SpecError (a UsageError) for a bad spec or a request the cluster cannot hold, with `.path` and `.line`;
UsageError for a bad site config; SlurmkitError when sbatch/scontrol fail, SlurmUnavailable (exit 3) when Slurm could
not be asked (no controller, munge refused). The Job handle is slurmkit/jobs/handle.py (docs/python-api.md).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .jobs.handle import Job, Slurm, as_completed
from .jobs.pipeline import SpecSource

__all__ = ["Client", "Job", "as_completed", "list_jobs", "submit", "render", "refresh"]


class Client:
    """Submits specs with one site config; caches the config, the backend and the cluster's nodes.

    `config`: the site config file (default: $SLURMKIT_CONFIG, else /etc/slurmkit/config.yaml, as the CLI).
    `check`: check each request against the cluster before sbatch (default: the site's submit.check_cluster).
    Safe to use from several threads."""

    def __init__(self, config: str | os.PathLike[str] | None = None, *, check: bool | None = None):
        self.config = os.fspath(config) if config is not None else None
        self.check = check
        self._lock = threading.Lock()
        self._settings = None
        self._backend = None
        self._nodes = None  # a function returning the node records (joins the first listing's thread)
        self._slurm: Slurm | None = None

    # --- what is cached for the process ---------------------------------------------------------------------------

    @property
    def settings(self):
        """The site config, loaded once."""
        with self._lock:
            if self._settings is None:
                from . import config

                self._settings = config.load(self.config)
            return self._settings

    @property
    def backend(self):
        """The Slurm backend the site config asks for, made once."""
        settings = self.settings
        with self._lock:
            if self._backend is None:
                from . import slurm

                self._backend = slurm.get_backend(settings)
            return self._backend

    def slurm(self) -> Slurm:
        """The job queries' runner (squeue/sacct/scontrol/scancel) with the site's Slurm timeout and bin_dir."""
        settings = self.settings
        with self._lock:
            if self._slurm is None:
                self._slurm = Slurm.from_settings(settings)
            return self._slurm

    def cluster_nodes(self) -> list:
        """The cluster's node records (the cluster check's listing), asked once and kept until refresh()."""
        return self._nodes_fn()()

    def _nodes_fn(self):
        backend = self.backend
        with self._lock:
            if self._nodes is None:
                from .jobs.pipeline import background

                self._nodes = _remember(background(backend.nodes_for_check), self)
            return self._nodes

    def refresh(self) -> None:
        """Forget the cached site config, backend and cluster nodes: the next call reads them again."""
        with self._lock:
            self._settings = self._backend = self._nodes = self._slurm = None

    # --- the calls ------------------------------------------------------------------------------------------------

    def render(self, spec: SpecSource, /, **overrides: Any) -> str:
        """The sbatch script for `spec` (a path to a spec file, or the spec as a mapping) with `overrides`;
        nothing is submitted, and the cluster is asked nothing but its topology (where submit.placement is on). Raises SpecError for a bad spec."""
        from .jobs.pipeline import build
        from .jobs.placing import asker

        # asks Slurm for its topology only where the site turned submit.placement on (multi-node jobs)
        _, r = build(spec, self.settings, overrides_to_sets(overrides), topology=asker(self.slurm()))
        return r.script

    def submit(self, spec: SpecSource, /, **overrides: Any) -> Job:
        """Render `spec` with `overrides`, check it against the cluster (unless check is off) and sbatch it;
        returns the Job (`int(job)` is the job id). Raises SpecError (with .path/.line) for a bad spec or one the
        cluster cannot hold, SlurmkitError when sbatch fails, SlurmUnavailable when Slurm cannot be asked."""
        from .jobs.pipeline import build
        from .jobs.placing import asker
        from .jobs.submitting import sbatch, slurm_said

        settings = self.settings
        check = settings.submit.check_cluster if self.check is None else self.check
        nodes = self._nodes_fn() if check else None  # the first listing runs while the spec is read and rendered
        with slurm_said(self.slurm()):
            _, r = build(spec, settings, overrides_to_sets(overrides), nodes=nodes, topology=asker(self.slurm()))
        return Job(sbatch(self.backend, r.script, self.slurm()), slurm=self.slurm())

    def jobs(self, *, user: str | None = None, name: str | None = None, all_users: bool = False) -> list[Job]:
        """The jobs slurmctld knows (yours unless `user` or all_users), as Jobs; see slurmkit.list_jobs()."""
        from .jobs.handle import jobs

        return jobs(user=user, name=name, all_users=all_users, slurm=self.slurm())


def _remember(result, client: Client):
    """`result` (a background call's joiner) returning its value every time; an error is not kept: the client
    forgets the call, so the next submit asks the cluster again."""
    box: dict = {}

    def nodes():
        if "value" not in box:
            try:
                box["value"] = result()
            except BaseException:
                with client._lock:
                    if client._nodes is nodes:
                        client._nodes = None
                raise
        return box["value"]

    return nodes


def overrides_to_sets(overrides: dict[str, Any]) -> list[str]:
    """Keyword overrides as `--set` items: `a__b=v` -> `a.b=<v as JSON, which is YAML>`."""
    from .errors import SpecError
    from .jobs.pipeline import yaml_text

    out = []
    for key, value in overrides.items():
        try:
            text = yaml_text(value)
        except (TypeError, ValueError) as e:
            raise SpecError(f"override {key}: not plain data (str, int, float, bool, None, list, dict): {e}") from None
        out.append(f"{key.replace('__', '.')}={text}")
    return out


# --- one Client per config for the module-level calls -------------------------------------------------------------

_clients: dict[tuple[str | None, bool | None], Client] = {}
_clients_lock = threading.Lock()


def _client(config, check) -> Client:
    key = (os.fspath(config) if config is not None else None, check)
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = Client(config, check=check)
        return c


def submit(
    spec: SpecSource, /, *, config: str | os.PathLike[str] | None = None, check: bool | None = None, **overrides: Any
) -> Job:
    """Submit a job spec (a path to a spec file, or the spec as a mapping) with keyword `overrides`; returns the
    Job (`int(job)` is the Slurm job id). `config`: the site config (default as the CLI); `check`: ask the cluster first (default: the
    site's submit.check_cluster). The site config and the cluster's nodes are cached for the process (refresh()).

        slurmkit.submit("train.yaml", nodes=2, env={"LR": "3e-4"})
    """
    return _client(config, check).submit(spec, **overrides)


def list_jobs(
    *, user: str | None = None, name: str | None = None, all_users: bool = False, config: str | None = None
) -> list[Job]:
    """Your jobs that slurmctld knows (running, pending, recently ended), as Jobs with their status read;
    `user`: another user's, `all_users`: everyone's; `name`: only jobs of that name. (Not `slurmkit.jobs`: that
    name is the subpackage slurmkit/jobs/, which would hide a function of the same name once imported.)"""
    return _client(config, None).jobs(user=user, name=name, all_users=all_users)


def render(spec: SpecSource, /, *, config: str | os.PathLike[str] | None = None, **overrides: Any) -> str:
    """The sbatch script `submit` would send for this spec and overrides (nothing is submitted)."""
    return _client(config, None).render(spec, **overrides)


def refresh() -> None:
    """Forget the cached site configs and cluster facts of the module-level submit()/render()."""
    with _clients_lock:
        clients = list(_clients.values())
    for c in clients:
        c.refresh()
