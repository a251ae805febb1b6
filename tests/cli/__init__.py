"""Tests of patchkit/cli/, toplevel.py, completion.py: the click layer."""
