import os

from slurmkit.checkpoint import manifest


def test_manifest_roundtrip_and_verify(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "a.bin").write_bytes(b"x" * 10000)
    (tmp_path / "opt.pt").write_bytes(b"y" * 7)
    assert manifest.read(str(tmp_path)) is None          # no manifest yet: incomplete
    m = manifest.build(str(tmp_path), step=5)
    manifest.write(str(tmp_path), m)
    got = manifest.read(str(tmp_path))
    assert got["step"] == 5 and [f["path"] for f in got["files"]] == ["model/a.bin", "opt.pt"]
    assert manifest.verify(str(tmp_path), got) == []
    (tmp_path / "opt.pt").write_bytes(b"z" * 7)
    assert manifest.verify(str(tmp_path), got) == ["opt.pt: sha256 mismatch"]
    os.truncate(tmp_path / "model" / "a.bin", 3)
    assert "model/a.bin: size 3 != 10000" in manifest.verify(str(tmp_path), got)


def test_manifest_rejects_escaping_paths(tmp_path):
    bad = ('{"format": "slurmkit-checkpoint/1", "step": 1, "algo": "sha256", '
           '"files": [{"path": "../etc/shadow", "size": 1, "hash": "00"}]}')
    (tmp_path / manifest.MANIFEST).write_text(bad)
    assert manifest.read(str(tmp_path)) is None
