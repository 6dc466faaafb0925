"""slurmkit/files.py: the atomic write every writer uses, and the one cache directory, trusted only when it is ours
alone (a cache holds what slurmkit runs or ships to every node)."""

from __future__ import annotations

import os
import stat

import pytest

from slurmkit import files
from slurmkit.install import bundle


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURMKIT_NO_CACHE", raising=False)
    return tmp_path / "cache"


def test_atomic_write_replaces_whole_with_the_mode_asked(tmp_path):
    p = tmp_path / "f.json"
    p.write_text("old")
    files.atomic_write(p, "new", mode=0o600, fsync=True)
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["f.json"]  # no temporary left behind


def test_atomic_write_leaves_the_old_file_when_it_fails(tmp_path):
    p = tmp_path / "f"
    p.write_text("old")

    with pytest.raises(TypeError):
        files.atomic_write(p, object())  # type: ignore[arg-type]
    assert p.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["f"]


def test_atomic_write_replaces_a_link_never_follows_it(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    link = tmp_path / "out"
    link.symlink_to(target)
    files.atomic_write(link, "mine")
    assert target.read_text() == "keep" and not link.is_symlink() and link.read_text() == "mine"


def test_cache_dir_is_made_private(xdg):
    d = files.cache_dir("jinja")
    assert d == str(xdg / "slurmkit" / "jinja")
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700 and stat.S_IMODE((xdg / "slurmkit").stat().st_mode) == 0o700


def test_an_empty_or_relative_xdg_cache_home_means_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for value in ("", "relative/dir"):
        monkeypatch.setenv("XDG_CACHE_HOME", value)
        assert files.cache_base() == str(tmp_path / ".cache" / "slurmkit")


@pytest.mark.parametrize("how", ["group-writable", "world-writable", "another user's", "a link", "its parent"])
def test_a_cache_dir_others_can_write_is_refused(xdg, tmp_path, how):
    d = xdg / "slurmkit" / "jinja"
    d.mkdir(parents=True, mode=0o700)
    (xdg / "slurmkit").chmod(0o700)
    if how == "group-writable":
        d.chmod(0o770)
    elif how == "world-writable":
        (xdg / "slurmkit").chmod(0o777)
    elif how == "another user's":
        os.chown(d, 65534, 65534)
    elif how == "a link":
        d.rmdir()
        (tmp_path / "other").mkdir(mode=0o700)
        d.symlink_to(tmp_path / "other")
    else:  # the cache's parent: another user's, who could move our directory away and put theirs in its place
        os.chown(xdg, 65534, 65534)
    assert files.cache_dir("jinja") is None


def test_no_cache_env_turns_caching_off(xdg, monkeypatch):
    monkeypatch.setenv("SLURMKIT_NO_CACHE", "1")
    assert files.cache_dir("jinja") is None and not xdg.exists()


def test_installs_build_cache_in_another_users_directory_is_never_used(xdg):
    """A venv tarball planted in the install cache would be pushed to every node as root: a cache directory that
    is not ours alone gives a fresh private directory instead (the build runs again)."""
    planted = xdg / "slurmkit" / "install" / "payload"
    planted.mkdir(parents=True)
    (planted / "0123456789abcdef.tar.gz").write_bytes(b"planted")
    assert bundle.cache_root() == xdg / "slurmkit" / "install"  # ours: used
    os.chown(xdg / "slurmkit" / "install", 65534, 65534)
    root = bundle.cache_root()
    assert root != xdg / "slurmkit" / "install" and not any(root.rglob("*.tar.gz"))
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
