"""Tests of patchkit/base/."""
