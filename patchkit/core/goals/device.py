"""The device a goal is about, as a value: a GPU's compute capability (and optionally the CUDA
toolkit it runs under).

A recipe's goal is "this fast path runs on SM120"; whether a gate already admits the device
(patchkit/core/goals/pyeval.py, cppeval.py) is a question about a ``Device``, not about the
spelling of a patch.  One frozen value, parsed from what people write (``sm120``, ``sm_120a``,
``12.0``), so every evaluator reads the same numbers: ``major``, ``minor``, ``sm`` (120, as
``get_device_sm()`` and vLLM's ``to_int()`` say it) and ``cuda_arch`` (1200, as
``__CUDA_ARCH__`` says it).  Pure: no I/O, no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

PLATFORMS = ("cuda", "rocm")
_SM = re.compile(r"^(?:sm|compute)_?(\d)(\d)?(\d)([af]?)$")  # sm90, sm_90a, sm120, sm_120f, compute_120
_DOTTED = re.compile(r"^(\d{1,2})\.(\d)$")  # 12.0, 9.0
_CUDA = re.compile(r"^(\d{1,2})\.(\d{1,2})$")


# The first CUDA toolkit that compiles for each architecture (NVIDIA's CUDA Toolkit release
# notes: 9.0 added sm_70, 10.0 sm_75, 11.0 sm_80, 11.1 sm_86, 11.4 sm_87, 11.8 sm_89 and sm_90,
# 12.8 sm_100, sm_101 and sm_120, 12.9 sm_103 and sm_121, 13.0 sm_110 (sm_101 renamed)).  A
# build for the device runs under one of these or a later one: a toolkit older than its
# architecture's first cannot be the one (``Device.first_cuda``).  An architecture not listed
# has no floor (nothing is assumed).
FIRST_CUDA = {
    (7, 0): (9, 0),
    (7, 5): (10, 0),
    (8, 0): (11, 0),
    (8, 6): (11, 1),
    (8, 7): (11, 4),
    (8, 9): (11, 8),
    (9, 0): (11, 8),
    (10, 0): (12, 8),
    (10, 1): (12, 8),
    (10, 3): (12, 9),
    (11, 0): (13, 0),
    (12, 0): (12, 8),
    (12, 1): (12, 9),
}


@dataclass(frozen=True)
class Device:
    """A GPU by compute capability: ``Device(12, 0)`` is consumer Blackwell (SM120).

    ``cuda`` is the CUDA toolkit version (torch.version.cuda) as a tuple, or None: not said
    (``sm120@cuda12.8`` says it).  Then a Python predicate's CUDA requirement is taken as met (a device runs
    only under a toolkit that knows it), and a CMake branch on the toolkit's version
    (``CMAKE_CUDA_COMPILER_VERSION``, cmakeeval.py) is read over every toolkit from the
    architecture's first on (``first_cuda``): true or false where all of them agree, else
    unknown; which arch list a build compiles is never assumed beyond that.  ``platform`` is "cuda"
    (or "rocm", where a check asks)."""

    major: int
    minor: int = 0
    cuda: Optional[tuple[int, int]] = None
    platform: str = "cuda"

    def __post_init__(self) -> None:
        if not (isinstance(self.major, int) and isinstance(self.minor, int)) or isinstance(self.major, bool):
            raise ValueError(f"a capability is two ints, not {self.major!r}.{self.minor!r}")
        if not (0 < self.major < 100 and 0 <= self.minor < 10):
            raise ValueError(f"{self.major}.{self.minor}: not a compute capability (major 1-99, minor 0-9)")
        if self.cuda is not None and not (
            isinstance(self.cuda, tuple) and len(self.cuda) == 2 and all(isinstance(x, int) for x in self.cuda)
        ):
            raise ValueError(f"cuda is a (major, minor) tuple, not {self.cuda!r}")
        if self.platform not in PLATFORMS:
            raise ValueError(f"platform {self.platform!r}: one of {', '.join(PLATFORMS)}")

    @classmethod
    def parse(cls, text: str, cuda: Optional[str] = None) -> Device:
        """``sm120``, ``sm_120a``, ``SM_120f``, ``compute_120``, ``sm90``, ``12.0``, ``sm121``;
        ``cuda``: the toolkit, e.g. ``"12.8"``.  ValueError for anything else (a bare ``120``
        is ambiguous: write ``sm120`` or ``12.0``)."""
        s = str(text).strip().lower()
        if "@" in s:  # sm120@cuda12.8, 12.0@12.8: the toolkit it is built with
            s, _, tk = s.partition("@")
            tk = tk.strip().removeprefix("cuda").strip()
            if cuda is not None and parse_cuda(cuda) != parse_cuda(tk):
                raise ValueError(f"{text!r}: two CUDA versions ({tk} and {cuda})")
            cuda = tk
            s = s.strip()
        m = _SM.match(s)
        if m:
            major, minor = int((m.group(1) + (m.group(2) or ""))), int(m.group(3))
        else:
            d = _DOTTED.match(s)
            if not d:
                raise ValueError(f"{text!r}: not a device (write sm120, sm_120a, 12.0, sm90)")
            major, minor = int(d.group(1)), int(d.group(2))
        return cls(major, minor, parse_cuda(cuda) if cuda is not None else None)

    @property
    def spec(self) -> str:
        """What ``parse`` reads back: ``12.0``, or ``12.0@cuda12.8`` with a toolkit."""
        return f"{self.major}.{self.minor}" + (f"@cuda{self.cuda[0]}.{self.cuda[1]}" if self.cuda else "")

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def sm(self) -> int:
        """``major * 10 + minor``: 120 for 12.0 (sglang's get_device_sm, vLLM's to_int)."""
        return self.major * 10 + self.minor

    @property
    def cuda_arch(self) -> int:
        """``__CUDA_ARCH__`` in device code compiled for it: 1200 for 12.0, 900 for 9.0."""
        return self.major * 100 + self.minor * 10

    def cuda_at_least(self, version: str) -> Optional[bool]:
        """Whether the toolkit is at least ``version`` ("12.8"); True when none was said (see
        the class), False off a CUDA platform."""
        if self.platform != "cuda":
            return False
        return True if self.cuda is None else self.cuda >= parse_cuda(version)

    @property
    def first_cuda(self) -> Optional[tuple[int, int]]:
        """The oldest CUDA toolkit a build for this device can run under (FIRST_CUDA): the
        toolkit named, else its architecture's first; None off CUDA or for an architecture
        not listed.  With no toolkit named, a CMake test of the toolkit's version is read over
        every toolkit from this one on (cmakeeval.py): ``VERSION_GREATER_EQUAL 12.8`` is true
        for 12.0, ``VERSION_GREATER_EQUAL 13.0`` unknown."""
        if self.platform != "cuda":
            return None
        return self.cuda if self.cuda is not None else FIRST_CUDA.get(self.capability)

    @property
    def name(self) -> str:
        return f"sm{self.sm}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_cuda(text: str) -> tuple[int, int]:
    m = _CUDA.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r}: not a CUDA version (write 12.8)")
    return (int(m.group(1)), int(m.group(2)))
