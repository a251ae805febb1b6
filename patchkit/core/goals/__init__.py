"""Goals: what a patch is for, judged on its own terms.

A recipe that widens an SM gate is *for* "this fast path runs on SM120".  Upstream may reach
that goal in other words (``or is_sm120_supported()``, ``supported_major_versions=[9, 10, 12]``,
``major >= 12``), and then the patch is not needed.  These modules decide, for a ``Device``
(device.py), whether a gate's code already admits it: pyeval.py for Python, cppeval.py for
``#if`` and C++ runtime checks, cmakeeval.py for CMake arch lists and ``if()`` branches.
They are pure: they read the text and trees they are given,
never files; what an engine's device checks mean is data (the ``predicates`` tables of
patchkit/base/engines.toml).
"""
