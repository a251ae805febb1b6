"""patchkit's store (patchkit/base/store.py): one schema, one writer, and each reason of its one
miss rule fires (absent, stale, untrusted, foreign, forged, no-key), the loud ones said once."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat

import pytest

from patchkit.base import store


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A cache and a config directory of this test's own, with the store's memos cleared."""
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "home" / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / "config"))
    (tmp_path / "home").mkdir(mode=0o700)
    os.chmod(tmp_path / "home", 0o700)
    monkeypatch.setattr(store, "_trusted", {})
    monkeypatch.setattr(store, "_key", {})
    monkeypatch.setattr(store, "_said", set())
    return tmp_path / "home"


K = "ab" * 32


def _forget() -> None:
    store._trusted.clear()
    store._said.clear()
    store._key.clear()


def _as_another_user(monkeypatch, path, field: int = 4) -> None:
    """``stat``, ``fstat`` and ``lstat`` of ``path`` report another owner (chown needs root)."""
    real_stat, real_lstat, real_fstat, target = os.stat, os.lstat, os.fstat, os.stat(path)

    def other(st):
        fields = list(st[:10])
        fields[field] = os.getuid() + 12345
        return os.stat_result(fields)

    class _Os:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def lstat(p, *a, **k):
            st = real_lstat(p, *a, **k)
            return other(st) if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino) else st

        @staticmethod
        def stat(p, *a, **k):
            st = real_stat(p, *a, **k)
            return other(st) if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino) else st

        @staticmethod
        def fstat(fd):
            st = real_fstat(fd)
            return other(st) if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino) else st

    monkeypatch.setattr(store, "os", _Os())


def test_an_entry_round_trips_with_one_header_and_the_writer_makes_it_0600_in_0700(fresh):
    store.put("plans", K, b'{"x": 1}')
    assert store.look("plans", K) == (b'{"x": 1}', None)
    path = fresh / "cache" / "plans" / K
    raw = path.read_bytes()
    head, _, payload = raw.partition(b"\n")
    assert payload == b'{"x": 1}'
    s = store.secret()
    mac = hmac.new(s, b"plans\0" + b"1\0" + K.encode() + b"\0" + payload, hashlib.sha256).hexdigest()
    assert head.decode() == f"#patchkit-store kind=plans schema=1 key={K} mac={mac}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((fresh / "cache").stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [K]  # no temp left


def test_absent_and_stale_are_quiet_misses(fresh, capsys):
    assert store.look("plans", K).miss == "absent"
    store.put("plans", K, b"x", schema=1)
    assert store.look("plans", K, schema=2).miss == "stale"  # another schema
    path = fresh / "cache" / "plans" / K
    (fresh / "cache" / "verdicts").mkdir()
    os.link(path, fresh / "cache" / "verdicts" / K)
    assert store.look("verdicts", K).miss == "stale"  # another kind
    path.write_bytes(b"patchkit-mac1 " + b"0" * 64 + b"\nx")  # an older patchkit's format
    assert store.look("plans", K).miss == "stale"
    path.unlink()
    os.mkfifo(path)  # not a file: never opened blocking
    assert store.look("plans", K).miss == "stale"
    path.unlink()
    path.symlink_to(fresh / "elsewhere")  # a link: never followed
    assert store.look("plans", K).miss == "stale"
    assert capsys.readouterr().err == ""


def test_a_changed_byte_a_moved_entry_and_another_keys_entry_are_forged_said_once(fresh, capsys):
    store.put("plans", K, b'{"x": 1}')
    path = fresh / "cache" / "plans" / K
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"x": 1', b'"x": 2'))
    assert store.look("plans", K).miss == "forged"
    other = "cd" * 32
    (path.parent / other).write_bytes(raw)  # a valid entry moved to another key
    assert store.look("plans", other).miss == "forged"
    path.write_bytes(raw)
    store.forge(path, b'{"x": 3}', b"\x07" * 32)  # sealed under a key not this user's
    assert store.look("plans", K).miss == "forged"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its MAC fails" in err


def test_an_entry_another_user_owns_or_others_may_write_is_foreign(fresh, capsys, monkeypatch):
    store.put("plans", K, b"x")
    path = fresh / "cache" / "plans" / K
    os.chmod(path, 0o620)
    assert store.look("plans", K).miss == "foreign"
    os.chmod(path, 0o600)
    assert store.look("plans", K).payload == b"x"
    os.chmod(path.parent, 0o770)  # the kind's directory the group may write
    assert store.look("plans", K).miss == "foreign"
    os.chmod(path.parent, 0o700)
    _as_another_user(monkeypatch, path)
    assert store.look("plans", K).miss == "foreign"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another user's or others may write it" in err


@pytest.mark.parametrize("where", ["cache", "parent"])
@pytest.mark.parametrize("how", ["group-writable", "other-writable", "foreign-owned"])
def test_an_untrusted_store_is_neither_read_nor_written_and_said_once(fresh, capsys, monkeypatch, where, how):
    cache = fresh / "cache"
    store.put("verdicts", K, b"{}")
    assert store.get("verdicts", K) == b"{}"
    d = cache if where == "cache" else fresh
    if how == "foreign-owned":
        if os.getuid() == 0:
            os.chown(d, 12345, 12345)
        else:
            _as_another_user(monkeypatch, d)
    else:
        os.chmod(d, d.stat().st_mode | (0o020 if how == "group-writable" else 0o002))
    _forget()
    assert store.look("verdicts", K).miss == "untrusted"
    store.put("verdicts", "cd" * 32, b"{}")
    store.put("records", cache / "wheels" / "x.sha256", b"{}")
    assert store.sealed("records", cache / "trees" / "t" / ".patchkit" / "checked", b"{}") is None
    assert store.get("verdicts", K) is None
    assert sorted(p.name for p in cache.rglob("*")) == [K, "verdicts"]  # nothing written
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not trusted" in err and str(d) in err


def test_a_sticky_ancestor_others_may_write_is_trusted_but_not_as_the_store_itself(tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "mine").mkdir(mode=0o700)
    assert store.why_untrusted(sticky / "mine") is None
    assert "is writable by" in store.why_untrusted(sticky)


def test_the_key_is_made_0600_and_one_others_may_read_is_refused(fresh, capsys):
    store.put("plans", K, b"x")
    path = fresh / "config" / "patchkit" / store.KEY_NAME
    assert (path.stat().st_mode & 0o777) == 0o600 and path.stat().st_size == 32
    os.chmod(path, 0o644)
    _forget()
    assert store.look("plans", K).miss == "no-key"
    store.put("plans", "cd" * 32, b"x")
    assert not (fresh / "cache" / "plans" / ("cd" * 32)).exists()  # no key: nothing written
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cache key" in err


def test_an_entry_kept_beside_what_it_describes_is_bound_to_its_place(fresh):
    cache = fresh / "cache"
    rec = cache / "wheels" / "d" / "1" / "d-1.whl.sha256"
    store.put_json("records", rec, {"sha256": "0" * 64})
    assert store.get_json("records", rec, dict) == {"sha256": "0" * 64}
    assert stat.S_IMODE(rec.parent.stat().st_mode) == 0o700
    moved = rec.parent / "e-1.whl.sha256"
    moved.write_bytes(rec.read_bytes())  # the record copied beside another archive
    assert store.get("records", moved) is None
    assert store.get("records", fresh / "outside.sha256") is None  # not in the store: never read
    store.put("records", fresh / "outside.sha256", b"x")
    assert not (fresh / "outside.sha256").exists()


def test_a_blob_is_read_only_while_it_has_its_digest(fresh):
    data = b"member bytes"
    digest = hashlib.sha256(data).hexdigest()
    assert store.put_blob(digest, data) and store.get_blob(digest) == data
    store.blob_path(digest).write_bytes(b"other bytes")
    assert store.get_blob(digest) is None
    assert store.put_blob(digest, data) and store.get_blob(digest) == data  # a damaged one replaced


def test_a_key_is_a_digest_of_framed_parts():
    assert store.key("ab", "c") != store.key("a", "bc")
    assert store.key(b"x") == store.key("x") and len(store.key()) == 64


def test_a_kind_or_key_that_is_not_a_plain_name_is_refused():
    for kind, k in (("../x", K), ("plans", "../x"), ("plans", ".hidden"), ("Plans", K)):
        with pytest.raises(ValueError):
            store.get(kind, k)
