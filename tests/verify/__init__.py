"""Tests of patchkit/verify/."""
