"""What a check gets to work with: settings, where it runs, and its input text (captured file or a command run
once per profile, shared between checks, with a timeout)."""

from __future__ import annotations

import os

from ..errors import CommandError, UsageError


class NoData(UsageError):
    """The input holds nothing this check can read (exit 2 for a captured file; a skip when live)."""


class Context:
    def __init__(
        self,
        settings,
        profile: str,
        *,
        node: str,
        job_gpus=None,
        captures=None,
        explicit=(),
        job_id=None,
        job_nodelist: str | None = None,
    ):
        self.settings = settings
        self.profile = profile  # prolog | epilog | full
        self.node = node
        self.job_gpus = job_gpus  # GPU indices the job gets (None: all)
        self.captures = captures or {}  # check name -> captured text
        self.explicit = set(explicit)  # checks the user asked for by name (--only)
        self.job_id = job_id
        self.job_nodelist = job_nodelist  # the job's nodes as a Slurm hostlist (the straggler check's peers)
        self._cache: dict[str, object] = {}
        self.expected_gpus: int | None = None
        self.exits: dict[str, tuple[list[str], int, str]] = {}  # source -> (argv, exit code, stderr) when non-zero
        self.used: dict[str, dict[str, None]] = {}  # check -> the sources it read, in order
        # source -> (reason, evidence) of a fault met while reading it that is a finding even though the checks
        # read it another way (an NVML call that hung: they read nvidia-smi instead)
        self.faults: dict[str, tuple[str, dict]] = {}
        # where "q" came from: {"source": "nvml"} or {"source": "nvidia-smi", "nvml": why not} (the health log)
        self.gpu_source: dict | None = None

    @property
    def live(self) -> bool:
        return not self.captures

    def tool_argv(self, source: str) -> list[str]:
        from ..proc import tool

        t = self.settings.tools
        if source.startswith("perfquery:"):  # perfquery:HCA:PORT, the names as ibstat printed them
            _, ca, port = source.split(":")
            return tool(t.perfquery, "-C", ca, "-P", port)
        return {
            "q": tool(t.nvidia_smi, "-q"),
            "dmesg": tool(t.dmesg),
            "nvlink_s": tool(t.nvidia_smi, "nvlink", "-s"),
            "nvlink_e": tool(t.nvidia_smi, "nvlink", "-e"),
            "allreduce": tool(t.all_reduce_perf, *self.settings.nccl.args),
            "dcgm_diag": tool(t.dcgmi, "diag", "-r", str(self.settings.dcgm.level)),
            "ibstat": tool(t.ibstat),
        }[source]

    def text(self, check: str, source: str, *, fresh: bool = False, timeout: float | None = None) -> str:
        """The captured text for `check`, else the output of the `source` command (cached for the profile).
        nvidia-smi's error text comes back as text (the parsers read it); a timeout or a missing tool raises
        CommandError."""
        if check in self.captures:
            return self.captures[check]
        self.used.setdefault(check, {})[source] = None
        if not fresh and source in self._cache:
            v = self._cache[source]
            if isinstance(v, BaseException):
                raise v
            return v  # type: ignore[return-value]
        from .. import proc

        if source == "q" and self.settings.health.gpu_source != "nvidia-smi":
            try:
                got = self._q_nvml(timeout or self.settings.health.command_timeout)
            except CommandError as e:
                self._cache[source] = e
                raise
            if got is not None:
                self._cache[source] = got
                return got
        try:
            # nvidia-smi's failures are findings (its error text is parsed); a kernel log we could not read is
            # not an empty one (dmesg_restrict for a non-root `slurmkit check`): that raises
            # the tools see the node judged (`check --node`), as slurmd's hooks do: SLURMD_NODENAME
            res = proc.run(
                self.tool_argv(source),
                check=(source == "dmesg"),
                timeout=timeout or self.settings.health.command_timeout,
                env={**os.environ, "SLURMD_NODENAME": self.node} if self.node else None,
            )
            out = res.stdout if res.returncode == 0 else (res.stdout + "\n" + res.stderr)
        except CommandError as e:
            self._cache[source] = e
            raise
        if source == "q" and self.gpu_source is None:
            self.gpu_source = {"source": "nvidia-smi"}
        if res.returncode != 0:
            # a tool that exits non-zero is a finding for every check that read it (the runner makes it one),
            # even when it printed nothing a parser recognizes
            self.exits[source] = (list(res.argv), res.returncode, res.stderr.strip()[-500:])
        else:
            self.exits.pop(source, None)
        self._cache[source] = out
        return out

    def _q_nvml(self, timeout: float) -> str | None:
        """`-q` text from NVML (health/nvml.py), or None: read nvidia-smi (auto, where NVML cannot be read; the
        reason is kept for the health log). A hung NVML call is a fault (a finding) and nvidia-smi is read
        instead; with `gpu_source: nvml` nothing is read instead (CommandError)."""
        from . import nvml

        mode = self.settings.health.gpu_source
        if mode == "auto" and self.settings.tools.nvidia_smi != "nvidia-smi":
            # a site that names its own nvidia-smi (a wrapper, a container, the fake GPU tools replaying a fault on
            # a trial node) is read through it: NVML in this process might see other GPUs, or the real ones
            self.gpu_source = {"source": "nvidia-smi", "nvml": "not read: tools.nvidia_smi names the site's own tool"}
            return None
        why = nvml.unavailable()
        if why is None:
            try:
                from .nvmlq import render

                text = render(nvml.read(timeout))
                self.gpu_source = {"source": "nvml"}
                self.faults.pop("q", None)
                return text
            except nvml.Unavailable as e:
                why = str(e)
            except nvml.Hung as e:
                why = str(e)
                ev = {"nvml_call": e.call, "seconds": round(e.seconds, 1), "still_hung": e.still}
                if mode == "nvml":
                    raise CommandError(f"{e} (health.gpu_source: nvml, no fallback)", argv=["nvml", e.call]) from None
                self.faults["q"] = (str(e), ev)
            except Exception as e:  # noqa: BLE001 - a binding or library that misbehaves: said, never a crash
                why = f"NVML read failed: {type(e).__name__}: {e}"
        if mode == "nvml":
            raise CommandError(f"health.gpu_source is nvml, but NVML cannot be read: {why}", argv=["nvml"])
        self.gpu_source = {"source": "nvidia-smi", "nvml": why}
        return None

    def fault(self, check: str) -> tuple[str, dict] | None:
        """(reason, evidence) of a fault met reading a source `check` read (an NVML call that hung), or None."""
        for src in self.used.get(check, {}):
            if src in self.faults:
                return self.faults[src]
        return None

    def failed_tool(self, check: str) -> tuple[list[str], int, str] | None:
        """(argv, exit code, stderr) of a command `check` read that exited non-zero, or None."""
        for src in self.used.get(check, {}):
            if src in self.exits:
                return self.exits[src]
        return None

    def accept_exit(self, source: str) -> None:
        """The check read `source`'s non-zero exit as an answer, not a failure to run (ibstat's "can't init UMAD
        library" on a node without an InfiniBand stack), so the runner does not make it a finding."""
        self.exits.pop(source, None)

    def prefetch(self, sources: list[str]) -> None:
        """Start the commands several checks will need at once, in parallel (threads: each waits on its own
        child), so the profile costs the slowest command, not their sum. Errors are cached for the checks."""
        todo = [s for s in dict.fromkeys(sources) if s not in self._cache]
        if len(todo) < 2:
            return
        import threading

        def one(src):
            try:
                self.text("", src)
            except CommandError:
                pass  # cached; the check that needs it reports it

        threads = [threading.Thread(target=one, args=(s,), daemon=True) for s in todo]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def state_path(self, name: str) -> str:
        return os.path.join(self.settings.paths.state_dir, f"{name}-{self.node}.json")
