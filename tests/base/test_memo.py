"""patchkit/base/memo.py: answers kept under the digest of the bytes they come from.  A changed
input or a changed deriving module is a miss; a bad entry (garbage, a link, a FIFO) is a
miss that is computed again and replaced; a refused input is refused every time."""

from __future__ import annotations

import os

import pytest

from patchkit.base import memo, store
from patchkit.base.errors import PatchkitError
from patchkit.fleet import profile


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir()
    monkeypatch.setenv("PATCHKIT_CACHE", str(d))
    return d


@pytest.mark.parametrize("value", [None, [], [[]], [["a", "b"], [], ["é", "x:y", "12:"]], [["", "\n\0"]], [["\udcff"]]])
def test_values_round_trip(value):
    assert memo.decode(memo.encode(value)) == value


@pytest.mark.parametrize(
    "raw", [b"", b"+", b"x", b"+3:ab", b"+2:1:", b"+a:", b"+1:x", b"+3:1:\xff", b"+999999999:", b"-x", b"+-1:"]
)
def test_bytes_that_are_not_an_entry_are_a_miss(raw):
    assert memo.decode(raw) is False or raw == b"+"  # b"+" is the empty list


def test_framing_tells_apart_what_concatenation_would_not():
    assert memo.framed([b"ab", b"c"]) != memo.framed([b"a", b"bc"])


def _counting(answer):
    calls = []

    def derive():
        calls.append(1)
        return answer

    return derive, calls


def _module(tmp_path):
    m = tmp_path / "deriver.py"
    m.write_text("# the code that derives\n")
    return str(m)


def test_an_answer_is_derived_once_per_input_and_per_code(cache, tmp_path):
    mod = _module(tmp_path)
    derive, calls = _counting([["sglang"]])
    assert memo.remembered("k", mod, b"one", derive) == [["sglang"]]
    assert memo.remembered("k", mod, b"one", derive) == [["sglang"]]
    assert len(calls) == 1
    memo.remembered("k", mod, b"two", derive)  # other bytes
    assert len(calls) == 2
    os.utime(mod, ns=(1, 1))  # a new patchkit: the module that derives changed
    memo.remembered("k", mod, b"one", derive)
    assert len(calls) == 3
    none, calls = _counting(None)
    assert memo.remembered("n", mod, b"x", none) is None and memo.remembered("n", mod, b"x", none) is None
    assert len(calls) == 1


@pytest.mark.parametrize("plant", ["garbage", "link", "fifo", "dir"])
def test_a_bad_entry_is_a_miss_and_is_replaced(cache, tmp_path, plant):
    mod = _module(tmp_path)
    derive, calls = _counting([["a"]])
    memo.remembered("k", mod, b"in", derive)
    (entry,) = (cache / "memo").iterdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"+4:1:b")  # a well-formed entry elsewhere: never read through a link
    entry.unlink()
    if plant == "garbage":
        entry.write_bytes(b"\x80\x04garbage")
    elif plant == "link":
        entry.symlink_to(victim)
    elif plant == "fifo":
        os.mkfifo(entry)
    else:
        entry.mkdir()
    assert memo.remembered("k", mod, b"in", derive) == [["a"]]
    assert len(calls) == 2
    assert victim.read_bytes() == b"+4:1:b"
    if plant in ("garbage", "link"):  # replaced by a regular entry (a link is replaced, not followed)
        assert not entry.is_symlink() and memo.decode(store.payload(entry)) == [["a"]]


def test_a_refused_input_is_refused_every_time_and_nothing_is_kept(cache, tmp_path):
    mod = _module(tmp_path)

    def refuse():
        raise PatchkitError("bad input", "fix it")

    for _ in range(2):
        with pytest.raises(PatchkitError, match="bad input"):
            memo.remembered("k", mod, b"in", refuse)
    assert not (cache / "memo").exists() or not any((cache / "memo").iterdir())


def test_a_profile_is_read_from_its_bytes_each_time(cache, tmp_path):
    p = tmp_path / "patchkit.toml"
    p.write_text('bundles = ["sm120"]\nexclude = ["allreduce-fusion"]\n')
    assert profile.load(p).exclude == ("allreduce-fusion",)
    assert profile.load(p).bundles == ("sm120",)  # the kept answer
    p.write_text('bundles = ["sm120"]\n')
    assert profile.load(p).exclude == ()
    p.write_text('bundles = ["sm120"]\nexclude = ["sm120"]\n')
    for _ in range(2):
        with pytest.raises(PatchkitError, match="'sm120' is both wanted and excluded"):
            profile.load(p)
