"""Authoring recipes: ``capture`` from an edited tree (``capture.py``, ``pycapture.py``,
``hunks.py``) and the recipes' own before/after examples (``examples.py``)."""
