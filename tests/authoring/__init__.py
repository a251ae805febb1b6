"""Tests of patchkit/authoring/."""
