"""patchkit's tests, one directory per package they test (docs/development.md)."""
