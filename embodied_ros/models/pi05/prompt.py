"""pi0.5's prompt: the task text and the discretized, normalized state in one string.

pi0.5 has no state input at model level; the state reaches the model as text:

    "Task: {cleaned task}, State: {bin bin ...};\nAction: "

cleaned task = task.strip(), then "_" and "\n" become spaces (in that order, so a trailing "_"
survives as a space). bin = the largest j in 0..255 with j/128 - 1 <= normalized value (an exact
comparison against the 256 left edges of [-1, 1)), so values below -1 give -1 and values at or
above 127/128 give 255. Only the robot's own state dims are written (no padding to max_state_dim).
"""

from __future__ import annotations

import numpy as np

STATE_BINS = 256
_BIN_EDGES = np.linspace(-1.0, 1.0, STATE_BINS + 1)[:-1]  # float64, as the reference computes them


def clean_task(task: str) -> str:
    return task.strip().replace("_", " ").replace("\n", " ")


def discretize_state(normalized_state: np.ndarray) -> np.ndarray:
    """[state_dim] normalized values -> int64 bins in -1..255."""
    state = np.asarray(normalized_state)
    if state.ndim != 1:
        raise ValueError(f"state must be a vector, got shape {state.shape}")
    if not np.all(np.isfinite(state)):
        raise ValueError(f"state has non-finite values: {state.tolist()}")
    return np.digitize(state, _BIN_EDGES).astype(np.int64) - 1


def build_prompt(task: str, state_bins: np.ndarray) -> str:
    bins = " ".join(str(int(b)) for b in state_bins)
    return f"Task: {clean_task(task)}, State: {bins};\nAction: "
