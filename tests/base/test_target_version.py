"""A target's version is read once, at start-up: the usual forms by a regex (no import of
packaging on ``status``'s fast path), the rest by packaging.  Both must agree."""

from __future__ import annotations

import pytest
from packaging.version import InvalidVersion, Version

from patchkit.base.errors import TargetError
from patchkit.base.target import _PLAIN_VERSION, _checked_version

SAMPLES = [
    "0.5.9", "0.5.10", "0.7.4rc1", "0.6.3.post1", "0.5.10.post1.dev3+cu128", "1!2.0", "v0.5.9",
    "0.5.9+cu128.sm120", "0.5.9-rc1", "0.5.9.RC1", "0.5", "10", "0.5.9a", "0.5.9+", "0.5.9+cu_128",
    "banana", "0.5.9 final", "", "0.5.9..1", "0.5.9.dev", "٣.٤", "0.5.9\n",
]  # fmt: skip


@pytest.mark.parametrize("v", SAMPLES)
def test_the_fast_regex_accepts_only_versions_and_the_check_agrees_with_packaging(v, tmp_path):
    try:
        Version(v)
        valid = True
    except InvalidVersion:
        valid = False
    if _PLAIN_VERSION.fullmatch(v):
        assert valid, v  # the regex is a strict subset of PEP 440
    if not v:
        return
    if valid:
        assert _checked_version((v, tmp_path / "METADATA")) == v
    else:
        with pytest.raises(TargetError, match="is not a version"):
            _checked_version((v, tmp_path / "METADATA"))


def test_the_regex_covers_the_releases_patchkit_pins():
    for v in ("0.5.9", "0.5.23", "0.6.3", "0.7.4", "0.5.13.post1", "0.5.10rc0"):
        assert _PLAIN_VERSION.fullmatch(v), v
