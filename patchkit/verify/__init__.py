"""`patchkit verify`: prove a recipe on the real toolchain (names resolve; CUDA builds)."""
