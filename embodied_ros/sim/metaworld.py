"""A Meta-World task as plain calls: reset to a seeded goal, step with an action, read the policy's state
vector and a small camera image. Shared by the simulator node, `embodied-ros eval metaworld`, the
training tool and the reference-environment evaluation, so all of them see the same observations.

Meta-World's MT1 benchmark holds 50 goal settings drawn per process; here each episode draws its own
goal from the episode seed instead, so training and evaluation goals are reproducible and distinct.
Rendering: MuJoCo's offscreen renderer on the "corner" camera with shadows and reflections off (the
image comes out upside down; training and evaluation share it). Needs mujoco 3.3.x, metaworld 3.0.x
and, without a display, OSMesa (MUJOCO_GL=osmesa).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

STATE_NAMES = ("hand_x", "hand_y", "hand_z", "gripper", "object_x", "object_y", "object_z",
               "goal_x", "goal_y", "goal_z")
ACTION_NAMES = ("delta_x", "delta_y", "delta_z", "grip")
TASK_TEXT = {"reach-v3": "reach the goal", "push-v3": "push the puck to the goal",
             "button-press-topdown-v3": "press the button from the top",
             "drawer-close-v3": "close the drawer", "window-open-v3": "open the window"}
IMAGE_SIZE = 64
CAMERA = "corner"
DEFAULT_MAX_STEPS = 200
CONTROL_PERIOD_S = 0.0125  # 5 physics steps of 2.5 ms per env step (metaworld's frame_skip)


def missing_simulator() -> str | None:
    """A one-line reason why the simulator cannot run here, or None."""
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    try:
        import metaworld  # noqa: F401
        import mujoco  # noqa: F401
    except ImportError as error:
        return f"the Meta-World simulator is not installed ({error}); run ./setup.sh"
    return None


def state_vector(observation: np.ndarray) -> np.ndarray:
    """(10,) float32 policy state from a Meta-World observation: hand xyz, gripper, object xyz, goal xyz."""
    return np.concatenate([observation[0:7], observation[36:39]]).astype(np.float32)


@dataclass
class StepResult:
    state: np.ndarray  # (10,) float32
    image: np.ndarray  # (IMAGE_SIZE, IMAGE_SIZE, 3) uint8
    reward: float
    success: bool


class MetaWorldTask:
    """One Meta-World task (one per process: a second environment in the same process misbehaves)."""

    def __init__(self, task: str, image_size: int = IMAGE_SIZE) -> None:
        reason = missing_simulator()
        if reason:
            raise RuntimeError(reason)
        import metaworld
        import mujoco
        if task not in metaworld.ALL_V3_ENVIRONMENTS:
            raise ValueError(f"unknown Meta-World task {task!r} (e.g. {', '.join(sorted(TASK_TEXT))})")
        self.task = task
        self.text = TASK_TEXT.get(task, task.removesuffix("-v3").replace("-", " "))
        self.env = metaworld.ALL_V3_ENVIRONMENTS[task]()
        self.env.set_task(metaworld.MT1(task, seed=0).train_tasks[0])
        self.env._freeze_rand_vec = False  # each reset draws a new goal from env.np_random
        self.env.seeded_rand_vec = True
        self.env._partially_observable = False  # the goal is part of the observation
        self.renderer = mujoco.Renderer(self.env.model, image_size, image_size)
        self._mujoco = mujoco
        self.observation: np.ndarray | None = None

    def reset(self, seed: int) -> StepResult:
        self.env.np_random = np.random.Generator(np.random.PCG64(seed))
        self.observation, _ = self.env.reset()
        return StepResult(state_vector(self.observation), self.render(), 0.0, False)

    def step(self, action: np.ndarray) -> StepResult:
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(4), -1.0, 1.0)
        self.observation, reward, _, _, info = self.env.step(action)
        return StepResult(state_vector(self.observation), self.render(), float(reward), bool(info["success"]))

    def render(self) -> np.ndarray:
        self.renderer.update_scene(self.env.data, camera=CAMERA)
        flags = self.renderer.scene.flags
        flags[self._mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        flags[self._mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        return self.renderer.render().copy()

    def expert(self):
        """Meta-World's scripted expert for this task: a callable observation -> (4,) action."""
        from metaworld import policies
        name = "Sawyer" + "".join(p.capitalize() for p in self.task.removesuffix("-v3").split("-")) + "V3Policy"
        policy = getattr(policies, name)()
        return lambda: np.asarray(policy.get_action(self.observation), dtype=np.float32)

    def close(self) -> None:
        self.renderer.close()
        self.env.close()
