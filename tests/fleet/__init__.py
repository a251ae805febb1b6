"""Tests of patchkit/fleet/."""
