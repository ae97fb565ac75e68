"""Contracts of the state-space-model family (Gated DeltaNet recurrent state)."""
