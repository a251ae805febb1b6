"""Authoring recipes: ``capture`` from an edited tree (``capture.py``, ``pycapture.py``,
``hunks.py``), the recipes' own before/after examples (``examples.py``) and porting a recipe
to a new release (``port.py``, drafted, verified, written with tomlkit).  It stands on
patchkit/upstream/ (releases, drift) and is the top of the feature layers."""
