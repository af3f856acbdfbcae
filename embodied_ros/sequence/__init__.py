"""Sequence builders: what a model reads, built from observations (prompt, tokens, normalized state,
model-space images, the prefix layout with its mask and positions)."""
