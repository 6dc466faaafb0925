"""The s3:// destination over real HTTP against moto's S3 emulator (moto_server on loopback), not AWS."""
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

boto3 = pytest.importorskip("boto3")

from slurmkit.checkpoint import manifest as mf  # noqa: E402
from slurmkit.checkpoint import s3 as s3mod  # noqa: E402
from slurmkit.checkpoint import sync as cs  # noqa: E402
from slurmkit.settings import SyncSettings  # noqa: E402



def _port() -> int:
    """SLURMKIT_TEST_S3_PORT (each Slurm version's run its own), else 7690; under pytest-xdist a free port of the
    kernel's for each worker: every worker that runs a test of this module starts its own moto_server, and two on
    one port crossed: a bucket made through one was missing in the next call (NoSuchBucket, in 26.05's CI run)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    return int(os.environ.get("SLURMKIT_TEST_S3_PORT", "7690"))


PORT = _port()


Cfg = SyncSettings(s3_endpoint=f"http://127.0.0.1:{PORT}", s3_region="us-east-1", s3_part_size=5 << 20)


@pytest.fixture(scope="module")
def server():
    exe = shutil.which("moto_server") or os.path.join(os.path.dirname(sys.executable), "moto_server")
    if not os.path.exists(exe):
        pytest.skip("moto[server] not installed")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    p = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(PORT)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=0.5).close()
            break
        except OSError:
            if p.poll() is not None:
                pytest.fail("moto_server exited")
            time.sleep(0.2)
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    yield p
    p.terminate()
    p.wait(timeout=10)


@pytest.fixture
def bucket(server, request):
    c = s3mod.client(Cfg)
    name = "ckpt-" + request.node.name.replace("_", "-")[:40].lower()
    c.create_bucket(Bucket=name)
    return name


def make_ckpt(root, step, big=0):
    d = os.path.join(root, f"step-{step:010d}")
    os.makedirs(os.path.join(d, "model"))
    with open(os.path.join(d, "model", "small.bin"), "wb") as f:
        f.write(os.urandom(1000 + step))
    if big:
        with open(os.path.join(d, "model", "big.bin"), "wb") as f:
            f.write(os.urandom(big))
    mf.write(d, mf.build(d, step))
    return d


def keys(bucket):
    c = s3mod.client(Cfg)
    return sorted(o["Key"] for o in c.list_objects_v2(Bucket=bucket).get("Contents", []))


def test_s3_multipart_manifest_last_skip_and_retention(tmp_path, bucket):
    src = str(tmp_path / "src")
    make_ckpt(src, 1, big=12 << 20)    # 12 MiB: a 3-part multipart upload at 5 MiB parts
    make_ckpt(src, 2)
    url = f"s3://{bucket}/alice/train"
    rep = cs.sync_dir(src, url, keep=2, settings=Cfg)
    assert rep["status"] == "ok", rep
    assert sorted(rep["copied"]) == ["step-0000000001", "step-0000000002"]
    d = s3mod.S3Dest(url, Cfg)
    complete, _, incomplete = d.scan()
    assert sorted(complete) == ["step-0000000001", "step-0000000002"] and incomplete == []
    c = s3mod.client(Cfg)
    big = c.get_object(Bucket=bucket, Key="alice/train/step-0000000001/model/big.bin")
    assert big["ETag"].strip('"').endswith("-3")  # really multipart
    data = big["Body"].read()
    assert data == open(os.path.join(src, "step-0000000001", "model", "big.bin"), "rb").read()
    # unchanged: skipped without uploading
    rep = cs.sync_dir(src, url, keep=2, settings=Cfg)
    assert rep["copied"] == [] and rep["bytes"] == 0 and len(rep["skipped"]) == 2
    # retention: step 3 in, step 1 out (manifest first, then the data)
    make_ckpt(src, 3)
    rep = cs.sync_dir(src, url, keep=2, settings=Cfg)
    assert rep["copied"] == ["step-0000000003"] and rep["pruned"] == ["step-0000000001"]
    assert not [k for k in keys(bucket) if "step-0000000001" in k]


def test_s3_upload_without_manifest_is_absent_and_cleaned(tmp_path, bucket):
    src = str(tmp_path / "src")
    make_ckpt(src, 5)
    url = f"s3://{bucket}/p"
    c = s3mod.client(Cfg)
    # a sync killed mid-upload: data objects there, no manifest; and an abandoned multipart upload
    c.put_object(Bucket=bucket, Key="p/step-0000000004/model/small.bin", Body=b"half")
    c.create_multipart_upload(Bucket=bucket, Key="p/step-0000000004/model/big.bin")
    d = s3mod.S3Dest(url, Cfg)
    complete, _, incomplete = d.scan()
    assert complete == {} and incomplete == ["step-0000000004"]  # readers treat it as absent
    rep = cs.sync_dir(src, url, keep=3, settings=Cfg)
    assert rep["status"] == "ok" and rep["copied"] == ["step-0000000005"], rep
    assert "step-0000000004" in rep["cleaned"]
    assert not [k for k in keys(bucket) if "step-0000000004" in k]
    assert c.list_multipart_uploads(Bucket=bucket, Prefix="p/").get("Uploads", []) == []
    # the uploaded checkpoint reads back byte for byte and hashes to its manifest
    man = d.read_manifest("step-0000000005")
    for f in man["files"]:
        body = c.get_object(Bucket=bucket, Key=f"p/step-0000000005/{f['path']}")["Body"].read()
        import hashlib
        assert len(body) == f["size"] and hashlib.new(man["algo"], body).hexdigest() == f["hash"]


def test_s3_corrupt_source_never_gets_a_manifest(tmp_path, bucket):
    src = str(tmp_path / "src")
    d = make_ckpt(src, 1, big=6 << 20)
    with open(os.path.join(d, "model", "big.bin"), "r+b") as f:
        f.seek(6 << 20 - 1)
        f.write(b"\0")
        f.seek(100)
        f.write(b"corrupt")
    rep = cs.sync_dir(src, f"s3://{bucket}/x", keep=2, settings=Cfg)
    assert rep["status"] == "failed" and "does not match its manifest" in rep["errors"][0]
    assert not [k for k in keys(bucket) if k.endswith(mf.MANIFEST)]


def test_s3_budget_defers_and_resume_skips_uploaded_objects(tmp_path, bucket):
    src = str(tmp_path / "src")
    make_ckpt(src, 1, big=6 << 20)
    url = f"s3://{bucket}/r"
    rep = cs.sync_dir(src, url, keep=2, settings=Cfg, deadline=0.0)
    assert rep["status"] == "partial" and rep["deferred"] == ["step-0000000001"]
    assert s3mod.S3Dest(url, Cfg).scan()[0] == {}
    rep = cs.sync_dir(src, url, keep=2, settings=Cfg)
    assert rep["copied"] == ["step-0000000001"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: drops to the job's user")
def test_s3_sync_for_job_as_the_jobs_user(bucket):
    import tempfile

    from slurmkit import config, healthlog
    from unit.checkpoint.test_sync import ALICE, ensure_user
    alice = ensure_user(ALICE)
    base = tempfile.mkdtemp(prefix="slurmkit-s3-", dir="/tmp")
    try:
        os.chmod(base, 0o755)
        src = os.path.join(base, "local", ALICE, "8", "ckpt")
        make_ckpt(src, 1, big=6 << 20)
        for dirpath, dirnames, filenames in os.walk(os.path.join(base, "local")):
            for n in [dirpath, *[os.path.join(dirpath, x) for x in dirnames + filenames]]:
                os.lchown(n, alice.pw_uid, alice.pw_gid)
        s = config.loads(f"""
paths: {{health_log: {base}/health.jsonl, state_dir: {base}/state}}
sync:
  enabled: true
  source: {base}/local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
  dest: s3://{bucket}/$SLURM_JOB_USER/$SLURM_JOB_NAME
  s3_endpoint: {Cfg.s3_endpoint}
  s3_part_size: {5 << 20}
  background: false
""")
        env = {"SLURM_JOB_USER": ALICE, "SLURM_JOB_UID": str(alice.pw_uid), "SLURM_JOB_ID": "8",
               "SLURM_JOB_NAME": "train"}
        rep = cs.sync_for_job(s, env)
        assert rep["status"] == "ok" and rep["copied"] == ["step-0000000001"], rep
        assert sorted(s3mod.S3Dest(f"s3://{bucket}/{ALICE}/train", Cfg).scan()[0]) == ["step-0000000001"]
        assert list(healthlog.read(f"{base}/health.jsonl"))[-1]["action"] == "copied"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_cli_sync_to_s3(tmp_path, bucket):
    src = str(tmp_path / "src")
    make_ckpt(src, 1)
    make_ckpt(src, 2)
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"sync:\n  s3_endpoint: {Cfg.s3_endpoint}\n")
    exe = os.path.join(os.path.dirname(sys.executable), "slurmkit")
    env = dict(os.environ, SLURMKIT_CONFIG=str(cfg), AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    r = subprocess.run([exe, "sync", src, f"s3://{bucket}/cli", "--keep", "1", "--json"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    assert json.loads(r.stdout)["copied"] == ["step-0000000002"]
    assert sorted(s3mod.S3Dest(f"s3://{bucket}/cli", Cfg).scan()[0]) == ["step-0000000002"]


def test_restore_on_resume_from_s3_newest_complete_verified_partial_absent(tmp_path, bucket, monkeypatch):
    """Issue 29: before the child starts, DEST's newest complete step (s3://) reaches node-local disk and
    checkpoint.latest() sees it; a step whose manifest never arrived (an interrupted upload) is absent."""
    from slurmkit import checkpoint
    from slurmkit.checkpoint.replicate import restore

    monkeypatch.setenv("SLURMKIT_S3_ENDPOINT", Cfg.s3_endpoint)
    src = str(tmp_path / "src")
    make_ckpt(src, 1)
    make_ckpt(src, 2, big=6 << 20)
    url = f"s3://{bucket}/alice/train"
    assert cs.sync_dir(src, url, keep=5, settings=Cfg)["status"] == "ok"
    c = s3mod.client(Cfg)
    # synthetic: step 3 uploaded without its manifest, as an upload cut off by the node's loss
    c.put_object(Bucket=bucket, Key="alice/train/step-0000000003/model/small.bin", Body=b"x")
    local = str(tmp_path / "local")
    r = restore(local, url, deadline=None)
    assert r["restored"] == "step-0000000002" and r["step"] == 2 and not r["errors"], r
    assert os.path.basename(checkpoint.latest(local).path) == "step-0000000002"
    with open(os.path.join(src, "step-0000000002", "model", "big.bin"), "rb") as a, \
            open(os.path.join(local, "step-0000000002", "model", "big.bin"), "rb") as b:
        assert a.read() == b.read()
    assert restore(local, url, deadline=None)["why"] == "node-local is as new as DEST"
    # a step at DEST whose file no longer matches its manifest: fail closed, nothing readable appears
    make_ckpt(src, 4)
    assert cs.sync_dir(src, url, keep=5, settings=Cfg)["status"] == "ok"
    c.put_object(Bucket=bucket, Key="alice/train/step-0000000004/model/small.bin", Body=b"corrupt")
    r = restore(local, url, deadline=None)
    assert r["restored"] is None and "not matching the manifest" in r["errors"][0], r
    assert os.path.basename(checkpoint.latest(local).path) == "step-0000000002"
