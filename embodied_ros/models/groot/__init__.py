"""GR00T N1.7 (LeRobot GrootPolicy): a Qwen3-VL backbone (backbone/qwen3_vl.py) and a flow-matching
DiT action head (heads/groot_dit.py), parity-gated against LeRobot's records."""
