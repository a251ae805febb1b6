"""CMake arch lists as gates (issue 31): the lists of a ``CMakeLists.txt`` or ``*.cmake`` file
that are closed for the device and open for the comparison device, read by
patchkit/core/goals/cmakeeval.py.

A list is reported where it does not admit the device (as vLLM's
``cuda_archs_loose_intersection`` reads it) and admits the comparison device: ``closed``
where the toolkit branch it stands in is taken for the device, ``unknown`` where that branch
cannot be decided (the device names no CUDA version: ``--device 12.0@cuda12.8`` does), and
left out where the branch is not taken (another arm of the version split is in effect).
Build options around it (``if(VLLM_GPU_LANG STREQUAL "CUDA")``) are configuration, not the
device, and are not read.  Pure: text in, rows out.
"""

from __future__ import annotations

from typing import Optional

from patchkit.core.goals import cmakeeval
from patchkit.core.goals.device import Device

NOT_READ = "not read: tree-sitter-cmake is not installed (pip install 'patchkit[goals]')"


def is_cmake(name: str) -> bool:
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    return base == "CMakeLists.txt" or base.endswith(".cmake")


def cmake_gates(text: str, device: Device, compare: Device) -> Optional[tuple[list[dict], list[dict]]]:
    """The closed and unknown arch lists of one CMake file, as gates.py's rows; None without
    tree-sitter-cmake."""
    lists = cmakeeval.arch_lists(text)
    if lists is None:
        return None
    closed, unknown = [], []
    for lst in lists:
        if cmakeeval.admits(lst.items, device) is not False or cmakeeval.admits(lst.items, compare) is not True:
            continue
        taken, why = cmakeeval.in_effect(lst, device)
        if taken is False:
            continue
        branch = lst.branch_text()
        row = {
            "line": lst.line,
            "kind": "cmake-arch-list",
            "condition": lst.shown,
            "function": lst.function,
            "guards": lst.guards,
            "branch": branch,
        }
        no = f"no element admits it (as cuda_archs_loose_intersection reads {device.major}.{device.minor})"
        if lst.extended:  # list(APPEND VAR ...) after it: the value built with is not the literal
            taken, why = None, f"{lst.var} is appended to at line {lst.extended}" + (f"; {why}" if why else "")
        if taken is True:
            row["why"] = f"false for {device}: {no}" + (f", under {branch}" if branch else "")
            row["open_why"] = f"true for {compare}"
            closed.append(row)
        else:
            row["why"] = f"unknown for {device}: {no}, but the branch is undecided: {why}"
            row["state"] = "unknown"
            unknown.append(row)
    return closed, unknown
