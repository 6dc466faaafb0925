"""S3-compatible destination for the checkpoint sync: s3://bucket/prefix/NAME/<files>, manifest uploaded LAST.

A reader treats a checkpoint without `NAME/slurmkit-manifest.json` as absent: S3 has no rename, so the manifest
object is the completion marker. Files larger than the part size go up as multipart uploads; every part and every
small object is sent with its Content-MD5 (the server rejects a corrupted body) and its returned ETag compared with
the MD5 we computed; the bytes' hash (the manifest's algorithm) is computed from what was read and sent, and must
equal the manifest's before the manifest is written. Each object carries metadata `slurmkit-hash: ALGO:HEX`, so an
interrupted sync resumes by skipping objects already there with the right size and hash. Retention deletes the
manifest first (the checkpoint disappears in one step), then the rest.

Imported only for s3:// destinations: boto3 is an optional dependency (`pip install slurmkit[s3]`). Tests run
against moto's S3 emulator over real HTTP on loopback, not against AWS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time

from ..settings import SyncSettings
from . import manifest as mf
from .engine import run_parallel
from .layout import is_hidden
from .report import Deferred, SyncError
from .safeio import open_nofollow


_CLIENTS: dict = {}


def client(settings: SyncSettings | None = None):
    """The boto3 S3 client for these settings, made once per process (sync.preload makes it before a privilege
    drop, with the service and paginator models loaded)."""
    cfg = settings or SyncSettings()
    endpoint = cfg.s3_endpoint or os.environ.get("SLURMKIT_S3_ENDPOINT") or None
    region = cfg.s3_region
    key = (endpoint, region)
    if key not in _CLIENTS:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise SyncError("s3:// destinations need boto3: pip install 'slurmkit[s3]'") from None
        c = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=region,
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=60),
        )
        c.get_paginator("list_objects_v2")
        _ = c.exceptions.NoSuchKey
        _CLIENTS[key] = c
    return _CLIENTS[key]


class S3Dest:
    def __init__(self, url: str, settings: SyncSettings | None = None):
        rest = url[len("s3://") :]
        self.bucket, _, prefix = rest.partition("/")
        self.prefix = (prefix.strip("/") + "/") if prefix.strip("/") else ""
        self.url = url
        self.part_size = (settings or SyncSettings()).s3_part_size
        self.s3 = client(settings)

    def __str__(self):
        return self.url

    def _key(self, name: str, rel: str = "") -> str:
        return f"{self.prefix}{name}/{rel}"

    def prepare(self, dry_run: bool = False) -> None:
        pass

    def lock(self, deadline) -> None:  # S3 has no locks; one epilog per job writes one job's prefix
        pass

    def unlock(self) -> None:
        pass

    def _names(self) -> list[str]:
        names = []
        pag = self.s3.get_paginator("list_objects_v2")
        for page in pag.paginate(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                names.append(cp["Prefix"][len(self.prefix) :].rstrip("/"))
        return sorted(names)

    def read_manifest(self, name: str) -> dict | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=self._key(name, mf.MANIFEST))["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None
        except Exception as e:  # 404 as a ClientError on some servers
            if "404" in str(e) or "NoSuchKey" in str(e):
                return None
            raise
        try:
            return mf.parse(body)
        except mf.ManifestError:
            return None

    def scan(self) -> tuple[dict[str, dict], list[str], list[str]]:
        complete, incomplete = {}, []
        for name in self._names():
            if is_hidden(name):
                continue
            m = self.read_manifest(name)
            if m is None:
                incomplete.append(name)  # an interrupted upload: absent to readers
            else:
                complete[name] = m
        return complete, [], incomplete

    def _objects(self, name: str) -> dict[str, dict]:
        out = {}
        pag = self.s3.get_paginator("list_objects_v2")
        for page in pag.paginate(Bucket=self.bucket, Prefix=self._key(name)):
            for o in page.get("Contents", []):
                out[o["Key"]] = o
        return out

    def _delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            self.s3.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
            )

    def cleanup(self, resume: list[str]) -> list[str]:
        removed = []
        up = self.s3.list_multipart_uploads(Bucket=self.bucket, Prefix=self.prefix)
        for u in up.get("Uploads", []):
            self.s3.abort_multipart_upload(Bucket=self.bucket, Key=u["Key"], UploadId=u["UploadId"])
            removed.append("upload:" + u["Key"][len(self.prefix) :])
        for name in self.scan()[2]:
            if name in resume:
                continue
            self._delete(list(self._objects(name)))
            removed.append(name)
        return removed

    def publish(self, src: str, name: str, man: dict, *, deadline, workers: int, progress) -> int:
        algo = man.get("algo", mf.DEFAULT_ALGO)
        # a stale manifest must not make a half-resumed upload look complete
        self.s3.delete_object(Bucket=self.bucket, Key=self._key(name, mf.MANIFEST))
        existing = self._objects(name)
        sent = [0]

        def one(f: dict) -> None:
            key = self._key(name, f["path"])
            tag = f"{algo}:{f['hash']}"
            o = existing.get(key)
            if o is not None and o["Size"] == f["size"]:
                head = self.s3.head_object(Bucket=self.bucket, Key=key)
                if head.get("Metadata", {}).get("slurmkit-hash") == tag:
                    return  # resumed
            fd = open_nofollow(src, f["path"])
            try:
                if os.fstat(fd).st_size != f["size"]:
                    raise SyncError(f"{name}/{f['path']}: size changed since the manifest")
                h = hashlib.new(algo)
                if f["size"] <= self.part_size:
                    data = os.pread(fd, f["size"] + 1, 0)
                    if len(data) != f["size"]:
                        raise SyncError(f"{name}/{f['path']}: size changed while reading")
                    h.update(data)
                    self._check(h, f, name)
                    md5 = hashlib.md5(data)
                    r = self.s3.put_object(
                        Bucket=self.bucket,
                        Key=key,
                        Body=data,
                        Metadata={"slurmkit-hash": tag},
                        ContentMD5=base64.b64encode(md5.digest()).decode(),
                    )
                    if r["ETag"].strip('"') != md5.hexdigest():
                        raise SyncError(f"{name}/{f['path']}: server ETag does not match what was sent")
                    if progress:
                        progress(len(data))
                else:
                    self._multipart(fd, key, tag, f, h, name, deadline, progress)
            finally:
                os.close(fd)
            head = self.s3.head_object(Bucket=self.bucket, Key=key)
            if head["ContentLength"] != f["size"] or head.get("Metadata", {}).get("slurmkit-hash") != tag:
                raise SyncError(f"{name}/{f['path']}: verification failed at the destination")
            sent[0] += f["size"]

        run_parallel(one, sorted(man["files"], key=lambda f: -f["size"]), workers)
        if deadline is not None and time.monotonic() > deadline:
            raise Deferred()
        body = json.dumps(man, indent=1).encode()
        self.s3.put_object(
            Bucket=self.bucket,
            Key=self._key(name, mf.MANIFEST),
            Body=body,
            ContentMD5=base64.b64encode(hashlib.md5(body).digest()).decode(),
        )
        return sent[0]

    @staticmethod
    def _check(h, f: dict, name: str) -> None:
        if h.hexdigest() != f["hash"]:
            raise SyncError(f"{name}/{f['path']}: source does not match its manifest ({h.name} mismatch)")

    def _multipart(self, fd, key, tag, f, h, name, deadline, progress) -> None:
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key, Metadata={"slurmkit-hash": tag})
        uid = up["UploadId"]
        parts = []
        try:
            off, num = 0, 1
            while off < f["size"]:
                if deadline is not None and time.monotonic() > deadline:
                    raise Deferred()
                data = os.pread(fd, min(self.part_size, f["size"] - off), off)
                if not data:
                    raise SyncError(f"{name}/{f['path']}: file shrank while reading")
                h.update(data)
                md5 = hashlib.md5(data)
                r = self.s3.upload_part(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=uid,
                    PartNumber=num,
                    Body=data,
                    ContentMD5=base64.b64encode(md5.digest()).decode(),
                )
                if r["ETag"].strip('"') != md5.hexdigest():
                    raise SyncError(f"{name}/{f['path']}: part {num} ETag does not match what was sent")
                parts.append({"ETag": r["ETag"], "PartNumber": num})
                off += len(data)
                num += 1
                if progress:
                    progress(len(data))
            self._check(h, f, name)
            self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=uid, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            try:
                self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=uid)
            except Exception:  # noqa: BLE001 - best effort; cleanup() aborts leftovers next run
                pass
            raise

    def remove(self, name: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self._key(name, mf.MANIFEST))  # absent from here on
        self._delete(list(self._objects(name)))


def fetch(d: S3Dest, name: str, local: str, *, deadline: float | None) -> int:
    """Restore on resume (issue 29): bring checkpoint NAME from S3 to LOCAL/NAME, every file checked against the
    manifest (size and hash) before one rename makes it visible; a partial or mismatched step raises SyncError and
    leaves nothing readable (only a `.tmp-` directory, which readers skip). Bytes fetched."""
    man = d.read_manifest(name)
    if man is None:
        raise SyncError(f"{d.url}/{name}: no manifest (an incomplete upload): not restored")
    algo = man.get("algo", mf.DEFAULT_ALGO)
    tmp = os.path.join(local, f".tmp-restore-{name}-{os.urandom(3).hex()}")
    os.makedirs(tmp)
    got = 0
    for f in man["files"]:
        if deadline is not None and time.monotonic() > deadline:
            raise Deferred()
        rel = os.path.normpath(f["path"])
        if rel.startswith(("..", "/")):
            raise SyncError(f"{d.url}/{name}: manifest path {f['path']!r} leaves the checkpoint")
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            body = d.s3.get_object(Bucket=d.bucket, Key=d._key(name, f["path"]))["Body"]
        except Exception as e:  # noqa: BLE001 - a missing part of the step: fail closed with what happened
            raise SyncError(f"{d.url}/{name}/{f['path']}: not fetched ({e})") from None
        h, n = hashlib.new(algo), 0
        with open(path, "xb") as out:
            for chunk in iter(lambda: body.read(1 << 20), b""):
                h.update(chunk)
                out.write(chunk)
                n += len(chunk)
        if n != f["size"] or h.hexdigest() != f["hash"]:
            raise SyncError(f"{d.url}/{name}/{f['path']}: fetched {n} bytes not matching the manifest")
        got += n
    with open(os.path.join(tmp, mf.MANIFEST), "xb") as out:
        out.write(json.dumps(man, indent=1).encode())
    os.rename(tmp, os.path.join(local, name))
    return got
