"""Heads: what turns a prefix cache into actions (flow-matching action expert and its solver)."""
