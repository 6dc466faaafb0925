#!/usr/bin/env python3
"""A real local Slurm cluster for tests, the demo and benchmarks.

    python3 dev/cluster.py up     [--dir D] [--port P] [--slurm 22.05|24.11|26.05] [--nodes 4] [--gpus 8] ...
    python3 dev/cluster.py down   [--dir D]
    python3 dev/cluster.py status [--dir D]
    python3 dev/cluster.py env    [--dir D]      # prints `export SLURM_CONF=...` lines

Everything lives in one directory (default /tmp/slurmkit-dev, or $SLURMKIT_DEV_DIR): slurm.conf, gres.conf,
munge key and socket, state, spool, logs, pid files, fake GPU device nodes, a slurmkit site config. Several
clusters can run side by side with different --dir and --port. `down` stops only the processes that `up`
started, by the pids it recorded (and the pid files: `scontrol reconfigure` restarts daemons under new pids).
Standard library only: it runs before the venv exists.

--slurm 22.05 (the default, or $SLURMKIT_DEV_SLURM) runs the host's Debian 12 packages. 24.11 and 26.05 run the
daemons and every Slurm client inside a cached Debian root fs (dev/rootfs.py: trixie, sid) whose private mount
namespace shows the cluster directory, the repository and /tmp at the same paths; the hooks and the site config
then use the repo's venv built with that root fs's Python (.venv-24.11, .venv-26.05). The version is recorded in
the directory (cluster.json), so `down`, `status` and `scenario` need only --dir, and env.sh exports
SLURMKIT_DEV_SLURM for tests to know what they run on.

Facts this relies on are in ../shared/DESIGN.md ("Slurm on these machines").
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fakenvml  # noqa: E402  (dev/fakenvml.py, standard library only)
import rootfs  # noqa: E402  (dev/rootfs.py, standard library only)

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from slurmkit.proc import pid_alive  # noqa: E402  (standard library only; tests import it from here too)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIR = Path(os.environ.get("SLURMKIT_DEV_DIR", "/tmp/slurmkit-dev"))
DEFAULT_PORT = int(os.environ.get("SLURMKIT_DEV_PORT", "6817"))
DEFAULT_SLURM = os.environ.get("SLURMKIT_DEV_SLURM", rootfs.HOST_SLURM)
DEB_PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]


def log(msg: str) -> None:
    print(f"[dev-cluster] {msg}", file=sys.stderr, flush=True)


def ensure_packages() -> None:
    missing = [b for b in ("slurmctld", "slurmd", "sinfo", "munged") if shutil.which(b) is None
               and not Path("/usr/sbin", b).exists()]
    if not missing:
        return
    log(f"installing {' '.join(DEB_PACKAGES)} from Debian packages (missing: {' '.join(missing)})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *DEB_PACKAGES],
                   check=True, env=env, timeout=900, stdout=subprocess.DEVNULL)


def sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def slurm_version(d: Path) -> str:
    """The Slurm version the cluster in `d` was started with (22.05 when it was started before versions)."""
    try:
        return json.loads((d / "cluster.json").read_text())["slurm"]
    except (OSError, ValueError, KeyError):
        return DEFAULT_SLURM


def cmd(version: str, argv: list[str], d: Path | None = None) -> list[str]:
    """argv run where that version's Slurm is: on the host for 22.05, else inside its root fs (which shows the
    cluster directory `d` at the same path, wherever it is)."""
    return rootfs.command(version, argv, binds=[str(d)] if d else [])


def venv_bin(version: str, name: str) -> str:
    return str(rootfs.venv_dir(version) / "bin" / name)


def hook_python(version: str) -> str:
    """The interpreter the hooks run on: the repo's venv on the host's Slurm, else that root fs's venv."""
    return str(REPO / ".venv" / "bin" / "python") if version == rootfs.HOST_SLURM else venv_bin(version, "python")


def read_pids(d: Path) -> dict[str, int]:
    p = d / "pids.json"
    return json.loads(p.read_text()) if p.exists() else {}


def write_pids(d: Path, pids: dict[str, int]) -> None:
    (d / "pids.json").write_text(json.dumps(pids, indent=1))


def wait_pidfile(path: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = int(path.read_text().strip())
            if pid_alive(pid):
                return pid
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"no live pid in {path} after {timeout}s")


def node_names(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


def render_slurm_conf(a, d: Path) -> str:
    host = socket.gethostname()
    hooks = d / "hooks"
    nodes = node_names(a.nodes)
    port0 = a.port + 1
    ports = f"[{port0}-{port0 + a.nodes - 1}]" if a.nodes > 1 else str(port0)
    cpus = a.sockets * a.cores_per_socket * a.threads_per_core
    gres = f"Gres=gpu:{a.gpus}" if a.gpus else ""
    return f"""# generated by dev/cluster.py: a local test cluster, not a production config
ClusterName={a.name}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={a.port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.socket
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
GresTypes=gpu
SlurmdParameters=config_overrides
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,sched_interval=2,nohold_on_prolog_fail
ReturnToService=2
MinJobAge=600
DefMemPerCPU=1000
KillWait=5
InactiveLimit=0
SlurmdTimeout=30
MessageTimeout=5
PrologEpilogTimeout=60
# a batch job's launch waits for its prolog: Slurm's default 10 s requeues a job whose prolog takes longer
BatchStartTimeout=60
Prolog={hooks}/prolog
Epilog={hooks}/epilog
PrologFlags=Alloc
{topology_lines(a)}{health_lines(a, hooks)}NodeName={"n[1-%d]" % a.nodes if a.nodes > 1 else "n1"} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports} CPUs={cpus} Boards=1 SocketsPerBoard={a.sockets} CoresPerSocket={a.cores_per_socket} ThreadsPerCore={a.threads_per_core} RealMemory={a.mem_mb} {gres} State=UNKNOWN
PartitionName=gpu Nodes={",".join(nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def topology_lines(a) -> str:
    """--topology-conf FILE: TopologyPlugin=topology/tree (topology/block when FILE has BlockName= lines) with FILE
    as the cluster's topology.conf (e.g. one `slurmkit fabric --topology-conf` wrote); --topology-yaml FILE (Slurm 25.05+): FILE as topology.yaml, which
    Slurm reads before any topology.conf and which names its plugin itself."""
    src = getattr(a, "topology_conf", None)
    if src:
        # BlockName= lines (NVLink domains, Slurm 23.11+) are topology/block's; SwitchName= lines topology/tree's
        block = any(ln.strip().lower().startswith("blockname=") for ln in Path(src).read_text().splitlines())
        return f"TopologyPlugin=topology/{'block' if block else 'tree'}\n"
    return ""


def write_topology(a, d: Path) -> None:
    """The topology file of --topology-conf/--topology-yaml beside slurm.conf (where Slurm looks), and no stale
    one from an earlier `up` in the same directory."""
    for name, src in (("topology.conf", getattr(a, "topology_conf", None)),
                      ("topology.yaml", getattr(a, "topology_yaml", None))):
        if src:
            shutil.copyfile(src, d / name)
        else:
            (d / name).unlink(missing_ok=True)


def health_lines(a, hooks: Path) -> str:
    """HealthCheckProgram (slurmkit's health/health through the wrapper) every --health-interval seconds, and
    the RebootProgram that "reboots" one node (dev/reboot-node: restarts that node's slurmd with a new fake boot).
    ResumeTimeout bounds a reboot: a node not back in time is set DOWN by Slurm."""
    n = getattr(a, "health_interval", 0)
    lines = f"RebootProgram={REPO}/dev/reboot-node\nResumeTimeout={getattr(a, 'resume_timeout', 60)}\n"
    if not n:
        return lines
    return lines + f"HealthCheckProgram={hooks}/health\nHealthCheckInterval={n}\nHealthCheckNodeState=ANY\n"


def render_gres_conf(a, d: Path) -> str:
    if a.gres_conf:
        return Path(a.gres_conf).read_text()
    if not a.gpus:
        return ""
    files = f"{d}/dev/nvidia[0-{a.gpus - 1}]" if a.gpus > 1 else f"{d}/dev/nvidia0"
    return f"Name=gpu File={files}\n"


def render_hook(d: Path, which: str, mode: str, path: str | None = None) -> str:
    hooks = d / "hooks"
    if mode == "true":
        return "#!/bin/sh\nexit 0\n"
    if mode == "python":  # the floor of any hook written in Python: the interpreter starts and exits (benchmarks)
        return f"#!/bin/sh\nexec {hook_python(slurm_version(d))} -I -S -c pass\n"
    version = slurm_version(d)
    # the repo's prolog picks <repo>/.venv; a root fs cluster's hooks run on that root fs's venv instead
    pyline = "" if version == rootfs.HOST_SLURM or path else \
        f"SLURMKIT_PYTHON={venv_bin(version, 'python')}\nexport SLURMKIT_PYTHON\n"
    # this cluster's hook agent (`up --agent`), never the node default /run/slurmkit/agent.sock: clusters of other
    # checkouts run on this host too. Without a running agent the socket is absent and the hooks run in process.
    agent = f"SLURMKIT_AGENT_SOCKET={agent_socket(d)}\nexport SLURMKIT_AGENT_SOCKET\n"
    if path:
        # another copy of the script (one `slurmkit install` put on the nodes); {node} is the slurmd's node name
        quoted = "'" + path.replace("'", "'\\''") + "'"
        target = quoted.replace("{node}", "'\"$SLURMD_NODENAME\"'")
        return (f"#!/bin/sh\n# generated by dev/cluster.py\nSLURMKIT_CONFIG={d}/slurmkit.yaml\n"
                f"SLURMKIT_FAKEGPU_DIR={d}/fakegpu\nexport SLURMKIT_CONFIG SLURMKIT_FAKEGPU_DIR\n{agent}"
                f"exec {target} \"$@\"\n")
    # The repo's own prolog/epilog, with the dev cluster's site config and fake GPU tools. Slurm gives hooks no
    # PATH and no environment of ours, so this wrapper is where the dev cluster says which config to use.
    return (f"#!/bin/sh\n# generated by dev/cluster.py\nSLURMKIT_CONFIG={d}/slurmkit.yaml\n"
            f"SLURMKIT_FAKEGPU_DIR={d}/fakegpu\nexport SLURMKIT_CONFIG SLURMKIT_FAKEGPU_DIR\n{agent}{pyline}"
            # a test may put a plain hook for one node beside this wrapper (e.g. a prolog that fails)
            f"[ -x \"{hooks}/{which}.$SLURMD_NODENAME\" ] && exec \"{hooks}/{which}.$SLURMD_NODENAME\" \"$@\"\n"
            f"exec {REPO}/{which}/{which} \"$@\"\n")


def agent_socket(d: Path) -> Path:
    return d / "run" / "agent" / "agent.sock"


def start_agent(version: str, d: Path) -> int:
    """The node's hook agent (slurmkit/agent/server.py), one for all of this cluster's nodes (they share the host),
    run where that version's slurmd runs; its log is log/agent.log. Returns its pid."""
    py = hook_python(version)
    sock, pidf = agent_socket(d), d / "run" / "agent.pid"
    sock.parent.mkdir(parents=True, exist_ok=True)
    sock.parent.chmod(0o700)
    pidf.unlink(missing_ok=True)
    with open(d / "log" / "agent.log", "ab") as out:
        subprocess.Popen(cmd(version, [py, "-I", "-m", "slurmkit.agent.server", "--socket", str(sock),
                                       "--pid-file", str(pidf)], d),
                         stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                         env=dict(os.environ, SLURMKIT_CONFIG=str(d / "slurmkit.yaml")))
    return wait_pidfile(pidf, 30)


def agent_cmd(a) -> None:
    """`agent start|stop|status`: the running cluster's hook agent, on or off (the next hook uses it, or runs in
    process), or what `slurmkit agent status` says of it (its exit code is this command's)."""
    d: Path = a.dir
    pids = read_pids(d)
    if not pids:
        log(f"no cluster recorded in {d}")
        raise SystemExit(1)
    pid = pids.get("agent")
    if a.action == "status":
        version = slurm_version(d)
        argv = [_slurmkit(version), "agent", "status", "--socket", str(agent_socket(d)), *(["--json"] if a.json else [])]
        raise SystemExit(subprocess.run(cmd(version, argv, d)).returncode)
    if a.action == "start":
        if pid and pid_alive(pid):
            log(f"the hook agent runs already (pid {pid})")
            return
        pids["agent"] = start_agent(slurm_version(d), d)
        log(f"hook agent started (pid {pids['agent']}); log: {d}/log/agent.log")
    else:
        if pid and pid_alive(pid):
            os.kill(pid, signal.SIGKILL if a.kill else signal.SIGTERM)
            deadline = time.monotonic() + 15
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        pids.pop("agent", None)
        log("hook agent stopped" + (" (SIGKILL: its socket file is left behind)" if a.kill else ""))
    write_pids(d, pids)


def _slurmkit(version: str) -> str:
    """The repo's slurmkit console script for that version's venv (not `python -m slurmkit.cli`: click's context
    lookup needs the package's own cli module)."""
    if version != rootfs.HOST_SLURM:
        return venv_bin(version, "slurmkit")
    venv = REPO / ".venv" / "bin" / "slurmkit"
    return str(venv) if venv.exists() else str(Path(sys.executable).parent / "slurmkit")


def render_site_config(a, d: Path) -> str:
    fake = REPO / "dev" / "fakegpu" / "bin"
    version = a.slurm
    return f"""# slurmkit site config for the dev cluster (generated by dev/cluster.py)
slurm:
  timeout: 10
tools:
  nvidia_smi: {fake}/nvidia-smi
  dmesg: {fake}/dmesg
  all_reduce_perf: {fake}/all_reduce_perf
  dcgmi: {fake}/dcgmi
paths:
  state_dir: {d}/slurmkit/state
  health_log: {d}/slurmkit/health/
sync:
  enabled: true
  source: {d}/local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
  dest: {d}/shared/ckpt/$SLURM_JOB_USER/$SLURM_JOB_NAME
  keep: 3
  budget: 20
submit:
  slurmkit_bin: {venv_bin(version, "slurmkit")}
  profiles:
    gpu: {REPO}/dev/topology/dev-2s8c-8gpu-synthetic.json   # synthetic: matches --sockets 2 --cores-per-socket 8
audit:
  price_per_gpu_hour: 2.5
  # the check runs "on the node": here the repo's slurmkit, with the node's fake GPU tools
  recheck_command: {json.dumps(["env", "SLURMKIT_FAKE_NODE={node}", f"SLURMKIT_CONFIG={d}/slurmkit.yaml",
                                f"SLURMKIT_FAKEGPU_DIR={d}/fakegpu", _slurmkit(version), "check", "--json",
                                "--node", "{node}", "--only", "{check}"])}
  recheck_timeout: 60
# health checks (issue 3): what the healthy-h100x8 scenario shows is what a healthy node must show
health:
  command_timeout: 3          # short, so the `hang` scenario fails fast in tests (production default: 10)
{remediate_lines(a)}xid:
  boot_id_file: {d}/fakegpu/boot/{{node}}   # each fake node's boot (dev/reboot-node gives it a new one)
gpu_procs:
  grace_seconds: 1            # the epilog waits this long for a job's processes to leave its GPUs
gpu_count:
  expected: {a.gpus}
driver:
  driver_versions: ["550.54.15", "550.163.01"]   # the synthetic captures; the mock NVML profiles
  cuda_versions: ["12.4"]
nccl:
  expected_busbw_gbps: 90
efficiency:                   # issue 15: fast samples so test jobs of seconds get verdicts
  interval: {getattr(a, "efficiency_interval", 0.5)}
  hung_seconds: 3
  watchdog_interval: {min(getattr(a, "efficiency_interval", 0.5), 5.0)}
  start_grace: 30
  steps_dir: {d}/steps        # report_step() files (jobs export SLURMKIT_STEPS_DIR to match)
"""


def remediate_lines(a) -> str:
    """--remediate N: health.remediate on, with a flap limit of N reboots (a short window keeps tests apart)."""
    n = getattr(a, "remediate", 0)
    if not n:
        return ""
    return f"  remediate: true\n  remediate_flap_limit: {n}\n"


def write_hooks(a, d: Path) -> None:
    """The wrappers slurm.conf's Prolog=/Epilog= name. slurmd reads them at every job: rewriting them (the `hooks`
    subcommand) changes what the next job runs, without a restart."""
    (d / "hooks").mkdir(parents=True, exist_ok=True)
    for which in ("prolog", "epilog", "health"):
        h = d / "hooks" / which
        tmp = h.with_name(f".{which}.tmp")
        tmp.write_text(render_hook(d, which, a.hooks, getattr(a, which, None)))
        tmp.chmod(0o755)
        os.replace(tmp, h)


def make_gpu_devices(d: Path, n: int) -> None:
    dev = d / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        p = dev / f"nvidia{i}"
        if p.exists():
            if stat.S_ISCHR(p.stat().st_mode):
                continue
            p.unlink()
        # slurmd's gres plugin rejects plain files; a character device with NVIDIA's major number passes.
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(195, i))


def setup_fakegpu(a, d: Path) -> None:
    """Each node answers nvidia-smi from a scenario directory (dev/fakegpu/scenarios/NAME)."""
    nodes_dir = d / "fakegpu" / "nodes"
    nodes_dir.mkdir(parents=True, exist_ok=True)
    overrides = dict(s.split("=", 1) for s in a.scenario)
    (d / "fakegpu" / "boot").mkdir(parents=True, exist_ok=True)
    fakenvml.setup(d)   # scenarios with an `nvml` file answer nvidia-smi with the real binary over the mock NVML
    for node in node_names(a.nodes):
        scen = overrides.get(node, a.default_scenario)
        set_scenario(d, node, scen)
        (d / "fakegpu" / "boot" / node).write_text(f"dev-boot-{node}-{time.time():.0f}\n")   # the first boot


def set_scenario(d: Path, node: str, scenario: str) -> None:
    src = Path(scenario) if "/" in scenario else REPO / "dev" / "fakegpu" / "scenarios" / scenario
    if not src.is_dir():
        raise SystemExit(f"dev-cluster: no fake GPU scenario {src}")
    link = d / "fakegpu" / "nodes" / node
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(src)
    if (src / "nvml").exists():
        if fakenvml.ready(d):
            raise SystemExit(f"dev-cluster: scenario {src.name} needs the mock NVML: {fakenvml.ready(d)}")
        fakenvml.reset(d, node)   # a new scenario starts with the profile's healthy GPUs
    # a new scenario is a new kernel log (as after a reboot): forget which Xid lines this node's hooks have seen
    (d / "slurmkit" / "state" / f"xid-{node}.json").unlink(missing_ok=True)


def env_lines(d: Path) -> str:
    return f"export SLURM_CONF={d}/slurm.conf\nexport SLURMKIT_CONFIG={d}/slurmkit.yaml\n" \
           f"export SLURMKIT_FAKEGPU_DIR={d}/fakegpu\nexport SLURMKIT_DEV_SLURM={slurm_version(d)}\n"


def client_env(d: Path) -> dict[str, str]:
    return dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))


def sinfo_states(d: Path) -> dict[str, str]:
    try:
        r = subprocess.run(cmd(slurm_version(d), ["sinfo", "-h", "-N", "-o", "%N|%T"], d), capture_output=True,
                           text=True, timeout=15, env=client_env(d))
    except subprocess.TimeoutExpired:
        return {}
    out = {}
    for line in r.stdout.splitlines():
        if "|" in line:
            n, s = line.split("|", 1)
            out[n] = s
    return out


def up(a) -> None:
    d: Path = a.dir
    if read_pids(d) and any(pid_alive(p) for p in read_pids(d).values()):
        log(f"a cluster is already running from {d}; run `down` first")
        raise SystemExit(1)
    version = a.slurm
    if version == rootfs.HOST_SLURM:
        ensure_packages()
    else:
        rootfs.ensure(version)
        if a.hooks != "true":
            rootfs.ensure_venv(version)          # the hooks and the site config run slurmkit from it
    for sub in ("munge", "state", "spool", "run", "log", "hooks", "slurmkit/state"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    # fresh state each time, slurmkit's too (health log, Xid marks, checkpoints): job ids restart at 1, and a
    # leftover record or checkpoint of an earlier run's job 2 would pass for this run's job 2
    for sub in ("state", "spool", "slurmkit", "local", "shared"):
        shutil.rmtree(d / sub, ignore_errors=True)
    for sub in ("state", "spool", "slurmkit/state"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for node in node_names(a.nodes):
        (d / "spool" / node).mkdir()
    (d / "cluster.json").write_text(json.dumps({"slurm": version}) + "\n")
    (d / "slurm.conf").write_text(render_slurm_conf(a, d))
    write_topology(a, d)
    cgroup = d / "cgroup.conf"
    if version == rootfs.HOST_SLURM:
        cgroup.unlink(missing_ok=True)
    else:
        # slurmd 24.11+ stops with "No filesystem mounted on /sys/fs/cgroup" in a root fs without this
        cgroup.write_text("# generated by dev/cluster.py\nCgroupPlugin=disabled\n")
    (d / "gres.conf").write_text(render_gres_conf(a, d))
    (d / "slurmkit.yaml").write_text(render_site_config(a, d))
    for sub in ("local", "shared/ckpt"):  # node-local checkpoints and the "shared filesystem" (issue 5)
        (d / sub).mkdir(parents=True, exist_ok=True)
        (d / sub).chmod(0o1777)
    write_hooks(a, d)
    make_gpu_devices(d, a.gpus)
    setup_fakegpu(a, d)
    (d / "env.sh").write_text(env_lines(d))

    pids: dict[str, int] = {}
    write_pids(d, pids)
    key = d / "munge" / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    (d / "munge").chmod(0o700)
    munge_pid = d / "run" / "munged.pid"
    munge_pid.unlink(missing_ok=True)
    subprocess.run(cmd(version, [daemon(version, "munged"), "--force", f"--key-file={key}",
                                 f"--socket={d}/munge/munge.socket", f"--pid-file={munge_pid}",
                                 f"--log-file={d}/log/munged.log", f"--seed-file={d}/munge/munged.seed"], d),
                   check=True, timeout=30)
    pids["munged"] = wait_pidfile(munge_pid, 10)
    write_pids(d, pids)

    if getattr(a, "agent", False):
        pids["agent"] = start_agent(version, d)
        write_pids(d, pids)

    env = client_env(d)
    ctld_pid = d / "run" / "slurmctld.pid"
    ctld_pid.unlink(missing_ok=True)
    # slurmctld daemonizes and exits 0 even when it dies right after: trust only its pid file and a live pid
    subprocess.run(cmd(version, [daemon(version, "slurmctld"), "-c", "-f", str(d / "slurm.conf")], d), check=True,
                   timeout=30, env=env)
    pids["slurmctld"] = wait_pidfile(ctld_pid, 15)
    write_pids(d, pids)
    for node in node_names(a.nodes):
        pf = d / "run" / f"slurmd-{node}.pid"
        pf.unlink(missing_ok=True)
        subprocess.run(cmd(version, [daemon(version, "slurmd"), "-f", str(d / "slurm.conf"), "-N", node], d),
                       check=True, timeout=30, env=env)
        pids[f"slurmd-{node}"] = wait_pidfile(pf, 15)
        write_pids(d, pids)
    wait_idle(d, node_names(a.nodes), a.timeout)
    log(f"cluster up: Slurm {version}, {a.nodes} nodes, {a.gpus} GPUs each; source {d}/env.sh")


def daemon(version: str, name: str) -> str:
    return sbin(name) if version == rootfs.HOST_SLURM else f"/usr/sbin/{name}"


def wait_idle(d: Path, nodes: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = sinfo_states(d)
        if states and all(states.get(n) == "idle" for n in nodes):
            return
        time.sleep(0.5)
    log(f"nodes not idle after {timeout}s: {states}")
    tail = (d / "log" / "slurmctld.log")
    if tail.exists():
        log("slurmctld.log tail:\n" + "\n".join(tail.read_text(errors="replace").splitlines()[-20:]))
    raise SystemExit(1)


def down(a) -> None:
    d: Path = a.dir
    pids = read_pids(d)
    if not pids:
        log(f"no cluster recorded in {d}")
        return
    env = client_env(d)
    # `scontrol reconfigure` (24.11+) restarts the daemons under new pids: the pid files know the current ones
    for name in pids:
        f = d / "run" / f"{name}.pid"
        try:
            cur = int(f.read_text().strip())
        except (OSError, ValueError):
            continue
        if cur != pids[name] and pid_alive(cur) and _is_daemon(cur, name):
            pids[name] = cur
    if pid_alive(pids.get("slurmctld", -1)):
        # scontrol shutdown leaves job steps alive: cancel the jobs first
        subprocess.run(cmd(slurm_version(d), ["scancel", "--full", "--quiet", "-p", "gpu"], d), env=env, timeout=15,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    order = [k for k in pids if k.startswith("slurmd-")] + ["slurmctld", "agent", "munged"]
    for name in order:
        pid = pids.get(name)
        if pid and pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for name in order:
        pid = pids.get(name)
        while pid and pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid and pid_alive(pid):
            log(f"{name} (pid {pid}) did not stop on SIGTERM; sending SIGKILL")
            os.kill(pid, signal.SIGKILL)
    write_pids(d, {})
    log("cluster down")


def _is_daemon(pid: int, name: str) -> bool:
    """A pid from a pid file is ours only if it still runs that daemon (pid files outlive their process)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == name.split("-")[0]
    except OSError:
        return False


def status(a) -> None:
    pids = read_pids(a.dir)
    for name, pid in pids.items():
        print(f"{name:14} {pid:7} {'running' if pid_alive(pid) else 'dead'}")
    if pids:
        for n, s in sorted(sinfo_states(a.dir).items()):
            print(f"{n:14} {s}")


def scenario_cmd(a) -> None:
    set_scenario(a.dir, a.node, a.name_)


def nvml_cmd(a) -> None:
    """`nvml NODE CTL-ARGS...`: nvml-mock-ctl on NODE's mock GPUs (its scenario must have an `nvml` file)."""
    if not (a.dir / "fakegpu" / "nodes" / a.node / "nvml").exists():
        log(f"{a.node}'s scenario is not a mock NVML one (dev/fakegpu/scenarios/nvml-*)")
        raise SystemExit(2)
    r = fakenvml.ctl(a.dir, a.node, a.args)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    raise SystemExit(r.returncode)


def add_hook_paths(p) -> None:
    p.add_argument("--prolog", metavar="PATH", help="exec this prolog instead of the repo's ({node} = the node's "
                   "name), e.g. the one `slurmkit install` put on the nodes")
    p.add_argument("--epilog", metavar="PATH", help="likewise for the epilog")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--port", type=int, default=DEFAULT_PORT, help="slurmctld port; slurmd ports follow it")
    u.add_argument("--slurm", choices=list(rootfs.VERSIONS), default=DEFAULT_SLURM,
                   help="Slurm version: 22.05 from the host's packages, 24.11/26.05 from a cached Debian root fs")
    u.add_argument("--name", default="skdev")
    u.add_argument("--nodes", type=int, default=4)
    u.add_argument("--gpus", type=int, default=8)
    u.add_argument("--sockets", type=int, default=2)
    u.add_argument("--cores-per-socket", type=int, default=8)
    u.add_argument("--threads-per-core", type=int, default=1)
    u.add_argument("--mem-mb", type=int, default=64000)
    u.add_argument("--gres-conf", help="use this gres.conf instead of the generated one")
    u.add_argument("--hooks", choices=["slurmkit", "true", "python"], default="slurmkit",
                   help="Prolog/Epilog: the repo's scripts, or for benchmarks /bin/true-like stubs, or a bare"
                        " `python -I -S -c pass` (the floor of a hook written in Python)")
    add_hook_paths(u)
    u.add_argument("--agent", action="store_true",
                   help="run the hook agent (slurmkit/agent/server.py): the prolog and epilog hand their work to it")
    u.add_argument("--efficiency-interval", type=float, default=0.5, metavar="SECONDS",
                   help="the efficiency sampler's interval (and watchdog, at most 5 s): 0.5 s so test jobs of"
                        " seconds get verdicts; 10 is the shipped default (benchmarks)")
    u.add_argument("--health-interval", type=int, default=0, metavar="SECONDS",
                   help="run slurmkit's health program as Slurm's HealthCheckProgram this often (0: not at all)")
    u.add_argument("--resume-timeout", type=int, default=60, metavar="SECONDS",
                   help="slurm.conf's ResumeTimeout: a rebooting node not back in this time is set DOWN by Slurm")
    u.add_argument("--remediate", type=int, default=0, metavar="N",
                   help="health.remediate on in the site config, flap limit N reboots (0: off, the default)")
    u.add_argument("--topology-conf", metavar="FILE",
                   help="TopologyPlugin=topology/tree with FILE as topology.conf (`slurmkit fabric --topology-conf`)")
    u.add_argument("--topology-yaml", metavar="FILE",
                   help="FILE as topology.yaml (Slurm 25.05+; `slurmkit fabric --topology-yaml`)")
    u.add_argument("--default-scenario", default="healthy-h100x8")
    u.add_argument("--scenario", action="append", default=[], metavar="NODE=SCENARIO")
    u.add_argument("--timeout", type=float, default=60)
    sub.add_parser("down")
    sub.add_parser("status")
    sub.add_parser("env")
    h = sub.add_parser("hooks", help="rewrite the Prolog/Epilog wrappers of a running cluster (next job uses them)")
    add_hook_paths(h)
    h.add_argument("--hooks", choices=["slurmkit", "true", "python"], default="slurmkit")
    ag = sub.add_parser("agent", help="start, stop or show the running cluster's hook agent")
    ag.add_argument("action", choices=["start", "stop", "status"])
    ag.add_argument("--json", action="store_true", help="status: as JSON")
    ag.add_argument("--kill", action="store_true", help="stop: SIGKILL, as a crash would (the socket stays)")
    s = sub.add_parser("scenario", help="point NODE's fake GPU tools at another scenario")
    s.add_argument("node")
    s.add_argument("name_", metavar="SCENARIO")
    n = sub.add_parser("nvml", help="nvml-mock-ctl on NODE's mock GPUs: fail --gpu 3 --mode fallen_off_bus, "
                       "throttle --gpu 5 hw_slowdown, reset --gpu all, status ...")
    n.add_argument("node")
    n.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    a.dir = a.dir.resolve()
    if a.cmd == "env":
        print(env_lines(a.dir), end="")
        return
    {"up": up, "down": down, "status": status, "scenario": scenario_cmd, "agent": agent_cmd, "nvml": nvml_cmd,
     "hooks": lambda a: write_hooks(a, a.dir)}[a.cmd](a)


if __name__ == "__main__":
    main()
