"""Tests of patchkit/core/."""
