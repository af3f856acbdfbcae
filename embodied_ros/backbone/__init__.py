"""Backbone execution: the transformer stacks models run (vision tower, language model, Wan blocks)."""
