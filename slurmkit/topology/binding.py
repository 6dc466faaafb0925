"""CPU/GPU/NIC binding for jobs, planned from a node profile (the `slurmkit topo --json` document).

Pure: profile in, plan out. `slurmkit submit` turns the plan's `sbatch` lines into #SBATCH options, its `srun`
options onto each step, and its `env` into exports.

How it chooses:
- GPUs per task: greedy groups, each seeded by the lowest free GPU and grown by the free GPU closest to the group
  (NV# with more links first, then PIX < PXB < PHB < NODE < SYS), ties broken by sharing a NUMA node (or, without
  NUMA data, the same CPU affinity), then by index. NVLink-connected or same-NUMA GPUs stay together.
- CPUs per task: the CPUs its GPUs are affine to; tasks that share a CPU set split it evenly, each contiguous run
  sliced in proportion so SMT siblings (cpu, cpu + cores) stay with the same task.
- NICs per task: the NICs nearest to any of its GPUs (PIX/PXB over PHB/NODE over SYS); when the nearest is SYS
  (across the CPU interconnect) no NIC is worth binding and a note says so.
"""

from __future__ import annotations

from typing import Any
from ..errors import UsageError
from .model import INTERCONNECTS, format_cpulist, is_nvlink, link_rank

NIC_LOCAL = 4.0  # PHB/NODE: same NUMA node


MAX_ID = 1 << 20  # CPU and NUMA ids: a CPU mask of 1 << 10**12 would take the planner 125 GB


def validate_profile(profile, path: str | None = None) -> dict:
    """Check the shape of a node profile (a `slurmkit topo --json` document); UsageError naming what is wrong."""
    where = path or "profile"

    def bad(msg):
        raise UsageError(f"not a slurmkit topo profile: {msg}", path=where)

    if not isinstance(profile, dict):
        bad("expected a JSON object")
    for key in ("gpus", "nics", "interconnect"):
        if key not in profile:
            bad(f"missing key {key!r}")
    if not isinstance(profile["gpus"], list) or not profile["gpus"]:
        bad("'gpus' must be a non-empty list")
    if profile["interconnect"] not in INTERCONNECTS:
        bad(f"'interconnect' must be one of {', '.join(INTERCONNECTS)}")
    for i, g in enumerate(profile["gpus"]):
        if not isinstance(g, dict) or g.get("index") != i:
            bad(f"gpus[{i}] must be an object with index {i}")
        for key, typ in (("cpus", list), ("numa", list), ("links", dict)):
            if not isinstance(g.get(key), typ):
                bad(f"gpus[{i}].{key} must be a {typ.__name__}")
        if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < MAX_ID for c in g["cpus"] + g["numa"]):
            bad(f"gpus[{i}]: cpus and numa must be lists of non-negative integers (0 to {MAX_ID - 1})")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in g["links"].items()):
            bad(f"gpus[{i}].links must map column names to link tokens")
    if not isinstance(profile["nics"], list):
        bad("'nics' must be a list")
    for i, n in enumerate(profile["nics"]):
        if (
            not isinstance(n, dict)
            or not isinstance(n.get("name"), str)
            or not (n.get("device") is None or isinstance(n.get("device"), str))
        ):
            bad(f"nics[{i}] must be an object with a string name and a string or null device")
    return profile


def _affine(a: dict, b: dict) -> bool:
    if a["numa"] and b["numa"]:
        return bool(set(a["numa"]) & set(b["numa"]))
    return bool(a["cpus"]) and a["cpus"] == b["cpus"]


def group_gpus(profile: dict, k: int, count: int) -> list[list[int]]:
    gpus = profile["gpus"]
    free = [g["index"] for g in gpus]
    groups = []
    for _ in range(count):
        group = [free.pop(0)]
        while len(group) < k:

            def cost(c):
                links = [link_rank(gpus[m]["links"].get(f"GPU{c}", "SYS")) for m in group]
                return (max(links), sum(links), 0 if all(_affine(gpus[c], gpus[m]) for m in group) else 1, c)

            best = min(free, key=cost)
            free.remove(best)
            group.append(best)
        groups.append(sorted(group))
    return groups


def _runs(cpus: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def split_cpus(cpus: list[int], parts: int) -> list[list[int]]:
    """Split a CPU set among `parts` tasks: slice each contiguous run in proportion when every run is long
    enough (keeps cpu and its SMT sibling cpu+N in one task), else cut the sorted list into equal chunks."""
    runs = _runs(cpus)
    if all(len(r) >= parts for r in runs):
        out: list[list[int]] = [[] for _ in range(parts)]
        for r in runs:
            size = len(r) // parts
            for p in range(parts):
                out[p].extend(r[p * size : (p + 1) * size])
        return out
    ordered = sorted(cpus)
    size = len(ordered) // parts
    return [ordered[p * size : (p + 1) * size] for p in range(parts)]


def _mask(ids: list[int]) -> str:
    m = 0
    for i in ids:
        m |= 1 << i
    return hex(m)


def plan_binding(profile: dict, gpus_per_task: int, tasks_per_node: int | None = None) -> dict:
    """profile: a `slurmkit topo --json` document. Returns
    {"tasks": [{"gpus": [0, 1], "cpus": [0, 1, ...], "nics": ["mlx5_0"]}, ...],   # one entry per task on a node
     "sbatch": ["--ntasks-per-node=4", "--gpus-per-node=8", "--cpus-per-task=24", "--exclusive"],
     "srun": ["--gpu-bind=mask_gpu:0x3,...", "--cpu-bind=mask_cpu:0x...,..."],
     "env": {"NCCL_IB_HCA": "mlx5_0,mlx5_1", ...},
     "notes": ["why each choice was made / what is missing"]}
    Raises UsageError for a malformed profile or an impossible request."""
    validate_profile(profile)
    gpus = profile["gpus"]
    n = len(gpus)
    k = gpus_per_task
    if not isinstance(k, int) or k < 1 or k > n:
        raise UsageError(f"gpus per task must be between 1 and {n} (the node has {n} GPUs), got {k!r}")
    if tasks_per_node is None:
        tasks_per_node = n // k
    if not isinstance(tasks_per_node, int) or tasks_per_node < 1 or tasks_per_node * k > n:
        raise UsageError(f"{tasks_per_node} tasks x {k} GPUs does not fit the node's {n} GPUs")
    t = tasks_per_node
    notes: list[str] = []
    groups = _gpu_groups(profile, k, t, notes)
    task_cpus, cpu_unknown, cpu_empty = _task_cpus(gpus, groups, notes)
    task_nics = _task_nics(profile, groups, notes)
    tasks = [{"gpus": grp, "cpus": cs, "nics": nics} for grp, cs, nics in zip(groups, task_cpus, task_nics)]
    sbatch, srun = _options(groups, task_cpus, t, k, bool(cpu_unknown or cpu_empty), notes)
    env = _nic_env(profile, task_nics, notes)
    return {"tasks": tasks, "sbatch": sbatch, "srun": srun, "env": env, "notes": notes}


def _gpu_groups(profile: dict, k: int, t: int, notes: list[str]) -> list[list[int]]:
    """GPUs: `t` groups of `k`, closest first (NVLink, then PCIe switch, then NUMA node)."""
    gpus = profile["gpus"]
    n = len(gpus)
    groups = group_gpus(profile, k, t)
    if t * k < n:
        notes.append(f"{n - t * k} of the node's {n} GPUs stay unused ({t} tasks x {k} GPUs)")
    for grp in groups:
        if len(grp) > 1:
            toks = sorted({gpus[a]["links"].get(f"GPU{b}", "?") for a in grp for b in grp if a < b}, key=link_rank)
            kind = "NVLink" if all(is_nvlink(x) for x in toks) else "PCIe/mixed"
            notes.append(f"GPUs {','.join(map(str, grp))} together: {kind} ({'/'.join(toks)})")
    if profile["interconnect"] == "pcie" and n > 1:
        notes.append("PCIe-only node: GPU-to-GPU traffic crosses PCIe; groups follow the PCIe switches and NUMA nodes")
    return groups


def _task_cpus(gpus: list[dict], groups: list[list[int]], notes: list[str]):
    """CPUs: the union of the group's GPU affinities, shared sets split among the tasks that use them.
    Returns (CPUs per task, tasks whose affinity is unknown, tasks left without CPUs)."""
    sets = []
    for grp in groups:
        cs = sorted({c for g in grp for c in gpus[g]["cpus"]})
        sets.append(cs)
    task_cpus: list[list[int]] = [[] for _ in groups]
    unknown = [i for i, cs in enumerate(sets) if not cs]
    by_set: dict[tuple[int, ...], list[int]] = {}
    for i, cs in enumerate(sets):
        if cs:
            by_set.setdefault(tuple(cs), []).append(i)
    claimed: set[int] = set()
    for shared, users in by_set.items():
        free_cs = [c for c in shared if c not in claimed]
        parts = split_cpus(free_cs, len(users))
        for u, part in zip(users, parts):
            task_cpus[u] = part
            claimed.update(part)
        if len(users) > 1:
            notes.append(f"tasks {','.join(map(str, users))} share CPUs {format_cpulist(shared)}: split evenly")
    empty = [i for i, cs in enumerate(task_cpus) if not cs and i not in unknown]
    if unknown:
        notes.append(
            f"CPU affinity unknown for the GPUs of task(s) {','.join(map(str, unknown))}: no --cpu-bind "
            f"(give the CPU layout with `slurmkit topo --lscpu-file`)"
        )
    if empty:
        notes.append(f"task(s) {','.join(map(str, empty))}: no CPUs left after splitting: no --cpu-bind")
    return task_cpus, unknown, empty


def _task_nics(profile: dict, groups: list[list[int]], notes: list[str]) -> list[list[str]]:
    """NICs: per task the nearest, if nearer than SYS (device names; a NIC without one is noted)."""
    gpus = profile["gpus"]
    nic_names = {n_["name"]: n_["device"] for n_ in profile["nics"]}
    task_nics: list[list[str]] = []
    nameless: set[str] = set()
    for grp in groups:
        # each NIC's distance to the task is its distance to the nearest of the task's GPUs; keep the nearest
        dist: dict[str, Any] = {}
        for g in grp:
            for col, tok in gpus[g]["links"].items():
                if col in nic_names:
                    dist[col] = min(dist.get(col, 99.0), link_rank(tok))
        chosen: list[str] = []
        if dist and min(dist.values()) <= NIC_LOCAL:
            best = min(dist.values())
            chosen = [c for c in nic_names if dist.get(c) == best]
        devs = []
        for col in chosen:
            if nic_names[col]:
                devs.append(nic_names[col])
            else:
                nameless.add(col)
        task_nics.append(devs)
    if not profile["nics"]:
        notes.append("no NICs in the profile: no NCCL_IB_HCA hint")
    elif not any(task_nics) and not nameless:
        notes.append("every NIC is SYS (across the CPU interconnect) from the GPUs: no NIC binding hint")
    if nameless:
        notes.append(
            f"{', '.join(sorted(nameless))} are near the GPUs but their device names are unknown (no NIC "
            f"Legend): not in NCCL_IB_HCA"
        )
    return task_nics


def _options(groups, task_cpus, t: int, k: int, cpus_unsure: bool, notes: list[str]):
    """The sbatch and srun options that apply the binding."""
    sbatch = [f"--ntasks-per-node={t}", f"--gpus-per-node={t * k}"]
    cpt = min((len(cs) for cs in task_cpus if cs), default=0)
    if cpt and not cpus_unsure:
        sbatch.append(f"--cpus-per-task={cpt}")
        if any(len(cs) != cpt for cs in task_cpus):
            notes.append(f"tasks get unequal CPU sets; --cpus-per-task={cpt} is the smallest")
    srun = []
    if k == 1:
        srun.append("--gpu-bind=map_gpu:" + ",".join(str(grp[0]) for grp in groups))
    else:
        srun.append("--gpu-bind=mask_gpu:" + ",".join(_mask(grp) for grp in groups))
    if cpt and not cpus_unsure:
        srun.append("--cpu-bind=mask_cpu:" + ",".join(_mask(cs) for cs in task_cpus))
        notes.append(
            "--cpu-bind needs TaskPlugin=task/affinity or task/cgroup; with task/none srun warns "
            "'lacks support for cpu binding' and runs the tasks unbound"
        )
    sbatch.append("--exclusive")
    notes.append("--exclusive: the binding names this node's physical GPU and CPU ids, so the job must own the node")
    return sbatch, srun


def _nic_env(profile: dict, task_nics: list[list[str]], notes: list[str]) -> dict[str, str]:
    """NCCL_IB_HCA: the NICs nearest the tasks' GPUs, exact names where a prefix would pick others too."""
    env: dict[str, str] = {}
    hcas: list[str] = []
    for nics in task_nics:
        for d in nics:
            if d not in hcas:
                hcas.append(d)
    if hcas:
        all_devs = [n_["device"] for n_ in profile["nics"] if n_["device"]]
        # NCCL_IB_HCA matches prefixes: "mlx5_1" would also select mlx5_10 and mlx5_11. "=" makes it exact.
        prefixed = any(o != h and o.startswith(h) for h in hcas for o in all_devs)
        env["NCCL_IB_HCA"] = ("=" if prefixed else "") + ",".join(hcas)
        if prefixed:
            notes.append(
                "NCCL_IB_HCA starts with '=' (exact names): a plain prefix like mlx5_1 would also pick mlx5_10/mlx5_11"
            )
        notes.append(
            "NCCL_IB_HCA lists the NICs nearest to the GPUs (PIX/PXB first, else PHB/NODE); per task: "
            + "; ".join(f"task {i}: {','.join(x) or '-'}" for i, x in enumerate(task_nics))
        )
    return env
