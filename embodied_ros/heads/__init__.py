"""Heads: what turns a prefix into outputs (pi0.5's flow-matching action expert and its Euler
solver; the world predictor of world-action models)."""
