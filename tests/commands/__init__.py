"""Tests of patchkit/commands/: a command end to end."""
