"""Primitives: values and helpers every layer uses, and that import nothing of patchkit's above.

Errors and the exit codes they map to, paths and the cache's place, the filesystem's safe
reads and writes (fsio), the recipe model's frozen values (model), a target and its engine,
the journal's format, op states and result values, terminal output."""
