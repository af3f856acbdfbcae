"""What a flow-matching VLA's runtime does around its model (pi0.5, pi0, SmolVLA): the camera batch and
the state of an observation, the normalization checks, stage checks, actions from model space to
physical units and back, and real-time chunking's guidance of a solve."""

from __future__ import annotations

import numpy as np

from embodied_ros.heads import rtc
from embodied_ros.pipeline.types import ChunkContinuation, Observation

def check_stats(config, state_stats, action_stats) -> None:
    """Normalization stats must have the model's state and action sizes."""
    for stats, dim, what in ((state_stats, config.state_dim, "state"), (action_stats, config.action_dim, "action")):
        if stats is not None and stats.dim != dim:
            raise ValueError(f"{what} normalization stats have {stats.dim} values, the model has {dim} {what}s")


def raw_state(observation: Observation, config, missing: str) -> np.ndarray:
    """The observation's state as float32 [state_dim]; `missing` says why a state-less observation is refused."""
    if observation.state is None:
        raise ValueError(f"{missing}; the observation has no state")
    state = np.asarray(observation.state, dtype=np.float32).reshape(-1)
    if state.size != config.state_dim:
        raise ValueError(f"state has {state.size} values, the model expects {config.state_dim} "
                         f"({', '.join(config.state_names)})")
    return state


def require_stage(result, stage: str, reader: str) -> None:
    if result.stage != stage:
        raise ValueError(f"{reader} needs the {stage} stage's result, got stage {result.stage!r}")


def camera_batch(observation: Observation, camera_names, size: int, family: str) -> tuple[np.ndarray, np.ndarray]:
    """(images [cameras, 3, size, size] in [-1, 1], present [cameras]) in model camera order; a missing
    camera's slot is filled with -1 and never read. No camera at all is refused."""
    from embodied_ros.sequence.images import model_image

    present = np.array([observation.images.get(name) is not None for name in camera_names])
    if not present.any():
        raise ValueError(f"no camera image in the observation; {family} reads {', '.join(camera_names)}")
    images = np.full((len(camera_names), 3, size, size), -1.0, np.float32)
    for index, name in enumerate(camera_names):
        if present[index]:
            images[index] = model_image(observation.images[name], size, name)
    return images, present


def physical_actions(actions: np.ndarray, raw_state: np.ndarray | None, config, action_stats) -> np.ndarray:
    """Model-space actions [C, action_dim] -> physical units (de-normalized, relative made absolute)."""
    if action_stats is not None:
        actions = action_stats.denormalize(actions)
    if config.relative_action_mask:
        if raw_state is None:
            raise ValueError("relative actions need the raw state of the observation")
        mask = np.array(config.relative_action_mask, dtype=np.float32)
        actions = actions + raw_state[: config.action_dim] * mask
    return actions.astype(np.float32)


def model_actions(actions: np.ndarray, raw_state: np.ndarray | None, config, action_stats) -> np.ndarray:
    """Physical actions [R, action_dim] -> model space, the inverse of `physical_actions` for the
    observation whose raw state is given (relative actions are taken from that state)."""
    actions = np.asarray(actions, dtype=np.float32)
    if actions.ndim != 2 or actions.shape[1] != config.action_dim:
        raise ValueError(f"actions must be [rows, {config.action_dim}], got shape {actions.shape}")
    if config.relative_action_mask:
        if raw_state is None:
            raise ValueError("relative actions need the raw state of the observation")
        mask = np.array(config.relative_action_mask, dtype=np.float32)
        actions = actions - raw_state[: config.action_dim] * mask
    if action_stats is not None:
        actions = action_stats.normalize(actions)
    return actions.astype(np.float32)


def continuation_guidance(continuation: ChunkContinuation | None, raw_state: np.ndarray | None, config,
                          action_stats) -> rtc.Guidance | None:
    """The real-time chunking guidance of an action solve over noise [chunk, max_action_dim] that
    continues `continuation` (its leftover in physical units); None for plain sampling."""
    if continuation is None:
        return None
    leftover = continuation.leftover
    if leftover is not None:
        leftover = model_actions(leftover, raw_state, config, action_stats)
    return rtc.chunk_guidance(continuation.settings, leftover, continuation.delay_rows,
                              (config.chunk_size, config.max_action_dim), config.num_inference_steps)
