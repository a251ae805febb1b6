"""Tests of patchkit/upstream/."""
