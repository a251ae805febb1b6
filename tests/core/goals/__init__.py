"""Tests of patchkit/core/goals/."""
