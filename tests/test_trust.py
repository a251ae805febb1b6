"""The cache's trust rule and the entries' MAC (patchkit/base/trust.py): each refusal fires."""

from __future__ import annotations

import hashlib
import hmac
import os

import pytest

from patchkit.base import fsio, regular, trust


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A cache and a config directory of this test's own, with trust's memos cleared."""
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "home" / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / "config"))
    (tmp_path / "home").mkdir(mode=0o700)
    os.chmod(tmp_path / "home", 0o700)
    monkeypatch.setattr(trust, "_trusted", {})
    monkeypatch.setattr(trust, "_key", {})
    monkeypatch.setattr(trust, "_said", set())
    return tmp_path / "home"


def test_the_mac_is_hmac_sha256_over_the_name_and_the_data():
    k = b"k" * 32
    assert trust.mac(k, "plans/x.json", b"{}") == hmac.new(k, b"12:plans/x.json{}", hashlib.sha256).digest()


def test_an_entry_round_trips_and_a_changed_byte_or_name_is_a_miss(fresh):
    cache = fresh / "cache"
    fsio.store_cached(cache, "plans/a.json", b'{"x": 1}')
    assert regular.read_cached(cache, "plans/a.json", 100) == b'{"x": 1}'
    raw = (cache / "plans/a.json").read_bytes()
    (cache / "plans/a.json").write_bytes(raw.replace(b'"x": 1', b'"x": 2'))
    assert regular.read_cached(cache, "plans/a.json", 100) is None  # a crafted entry: a miss
    (cache / "plans/b.json").write_bytes(raw)  # a valid entry moved to another name
    assert regular.read_cached(cache, "plans/b.json", 100) is None
    (cache / "plans/c.json").write_bytes(b'{"x": 1}')  # no MAC at all
    assert regular.read_cached(cache, "plans/c.json", 100) is None


def test_the_key_is_made_0600_and_one_others_may_read_is_refused(fresh, capsys):
    k = trust.key()
    path = fresh / "config" / "patchkit" / trust.KEY_NAME
    assert k is not None and len(k) == 32 and (path.stat().st_mode & 0o777) == 0o600
    os.chmod(path, 0o644)
    trust._key.clear()
    assert trust.key() is None
    assert fsio.store_cached(fresh / "cache", "plans/a.json", b"x") is None
    assert not (fresh / "cache" / "plans" / "a.json").exists()  # no key: nothing written
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cache key" in err


@pytest.mark.parametrize("where", ["cache", "parent"])
@pytest.mark.parametrize("how", ["group-writable", "other-writable", "foreign-owned"])
def test_an_untrusted_cache_is_neither_read_nor_written_and_said_once(fresh, capsys, where, how):
    cache = fresh / "cache"
    fsio.store_cached(cache, "verdicts/a.json", b"{}")
    assert regular.read_cached(cache, "verdicts/a.json", 100) == b"{}"
    d = cache if where == "cache" else fresh
    if how == "foreign-owned":
        if os.getuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(d, 12345, 12345)
    else:
        os.chmod(d, d.stat().st_mode | (0o020 if how == "group-writable" else 0o002))
    trust._trusted.clear()
    assert regular.read_cached(cache, "verdicts/a.json", 100) is None
    fsio.store_cached(cache, "verdicts/b.json", b"{}")
    assert regular.read_cached(cache, "verdicts/a.json", 100) is None
    assert not (cache / "verdicts" / "b.json").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not trusted" in err and str(d) in err


def test_a_sticky_ancestor_others_may_write_is_trusted_but_not_as_the_cache_itself(tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "mine").mkdir(mode=0o700)
    assert trust.trusted_dir(sticky / "mine")
    assert not trust.trusted_dir(sticky)
