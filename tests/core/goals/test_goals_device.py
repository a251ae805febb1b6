"""The goals' device value (patchkit/core/goals/device.py): what people write for a GPU
(sm120, sm_120a, 12.0) read as one capability, and the numbers each evaluator reads."""

from __future__ import annotations

import dataclasses

import pytest

from patchkit.core.goals.device import Device, parse_cuda


@pytest.mark.parametrize(
    "text,cap",
    [
        ("sm120", (12, 0)),
        ("sm_120a", (12, 0)),
        ("SM_120f", (12, 0)),
        ("compute_120", (12, 0)),
        ("12.0", (12, 0)),
        ("sm121", (12, 1)),
        ("sm_121a", (12, 1)),
        ("sm100", (10, 0)),
        ("sm_103a", (10, 3)),
        ("sm90", (9, 0)),
        ("sm_90a", (9, 0)),
        ("sm89", (8, 9)),
        ("9.0", (9, 0)),
        (" sm110 ", (11, 0)),
    ],
)
def test_parse(text, cap):
    d = Device.parse(text)
    assert d.capability == cap and d.cuda is None and d.platform == "cuda"


@pytest.mark.parametrize("text", ["120", "sm", "sm_1200", "12", "12.10", "gfx942", "sm_120x", "", "twelve"])
def test_parse_refuses(text):
    with pytest.raises(ValueError):
        Device.parse(text)


def test_numbers():
    d = Device.parse("sm120")
    assert (d.sm, d.cuda_arch, d.name, str(d)) == (120, 1200, "sm120", "12.0")
    d = Device.parse("sm_90a")
    assert (d.sm, d.cuda_arch, d.name, str(d)) == (90, 900, "sm90", "9.0")
    assert Device.parse("sm121").cuda_arch == 1210


def test_frozen_and_equal():
    d = Device.parse("sm_120a")
    assert d == Device(12, 0) == Device.parse("12.0") and hash(d) == hash(Device(12, 0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.major = 10  # type: ignore[misc]


def test_cuda():
    d = Device.parse("sm120", cuda="12.8")
    assert d.cuda == (12, 8)
    assert d.cuda_at_least("12.8") is True and d.cuda_at_least("12.9") is False
    assert d.cuda_at_least("12.10") is False  # 12.10 > 12.8: versions compare as numbers
    assert Device(12, 0).cuda_at_least("13.0") is True  # not said: taken as met
    assert Device(9, 4, platform="rocm").cuda_at_least("11.0") is False
    assert parse_cuda("13.0") == (13, 0)
    with pytest.raises(ValueError):
        parse_cuda("12")


@pytest.mark.parametrize(
    "kw",
    [
        {"major": 0},
        {"major": 12, "minor": 10},
        {"major": True},
        {"major": 12, "cuda": "12.8"},
        {"major": 12, "platform": "tpu"},
    ],
)
def test_bad_values(kw):
    with pytest.raises(ValueError):
        Device(**kw)


@pytest.mark.parametrize(
    "text,cuda,spec",
    [
        ("sm120@cuda12.9", (12, 9), "12.0@cuda12.9"),
        ("12.0@12.8", (12, 8), "12.0@cuda12.8"),
        ("sm_121a @ cuda 13.0", (13, 0), "12.1@cuda13.0"),
        ("sm120", None, "12.0"),  # no toolkit named: unknown, never assumed
    ],
)
def test_a_device_names_its_toolkit(text, cuda, spec):
    d = Device.parse(text)
    assert d.cuda == cuda and d.spec == spec and Device.parse(d.spec) == d


@pytest.mark.parametrize("text", ["sm120@cuda", "sm120@cuda12", "12.0@twelve"])
def test_a_bad_toolkit_is_refused(text):
    with pytest.raises(ValueError):
        Device.parse(text)


def test_two_toolkits_are_refused():
    with pytest.raises(ValueError, match="two CUDA versions"):
        Device.parse("sm120@cuda12.9", cuda="13.0")
