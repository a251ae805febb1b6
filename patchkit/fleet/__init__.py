"""The fleet: patched wheels (``wheel.py``), forks (``fork.py``), an interpreter's installs
(``interp.py``, ``doctor.py``), profiles of which recipes a venv carries (``profile.py``) and
FlashInfer's JIT cache (``jit.py``)."""
