"""Suites of the state-space-model family (Gated DeltaNet)."""
