"""A Meta-World task as plain calls: reset to a seeded goal, step with an action, read the policy's state
vector and a small camera image. Shared by the simulator node, `embodied-ros eval metaworld`, the
training tool and the reference-environment evaluation, so all of them see the same observations.

Meta-World's MT1 benchmark holds 50 goal settings drawn per process; here each episode draws its own
goal from the episode seed instead, so training and evaluation goals are reproducible and distinct.
Rendering: MuJoCo's offscreen renderer on the "corner" camera with shadows and reflections off (the
image comes out upside down; training and evaluation share it).

Moving goals (`goal_speed` > 0, m per env step; reach-v3 and button-press-topdown-v3): before every
step the thing to reach (reach's goal point, the button's box) moves horizontally at that constant
speed, in a direction drawn from the episode seed, and bounces off the edges of the region the task
draws it from at reset, so it never leaves the range the policy was trained on. The state's goal
follows it. The hand moves at most 1 cm a step per axis (Meta-World's action scale). Needs mujoco 3.3.x, metaworld 3.0.x
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
MOVING = {"reach-v3": "goal", "button-press-topdown-v3": "box"}  # what a moving goal moves, per task
GOAL_DIRECTION_STREAM = 7  # the goal's direction: np.random.default_rng((seed, this)), apart from the env's draws


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


def hold_action(last: np.ndarray | None) -> np.ndarray:
    """The command that keeps the arm where it is: no end-effector motion, the gripper as last commanded."""
    grip = 0.0 if last is None else float(np.asarray(last).reshape(-1)[3])
    return np.array([0.0, 0.0, 0.0, grip])


def bounce(position: np.ndarray, velocity: np.ndarray, low: np.ndarray, high: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """position + velocity, reflected back into [low, high] per axis (the velocity flips on a bounce)."""
    position, velocity = position + velocity, velocity.copy()
    for axis in range(position.size):
        if position[axis] > high[axis]:
            position[axis], velocity[axis] = 2 * high[axis] - position[axis], -velocity[axis]
        elif position[axis] < low[axis]:
            position[axis], velocity[axis] = 2 * low[axis] - position[axis], -velocity[axis]
    return np.clip(position, low, high), velocity


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

    def __init__(self, task: str, image_size: int = IMAGE_SIZE, goal_speed: float = 0.0) -> None:
        reason = missing_simulator()
        if reason:
            raise RuntimeError(reason)
        if not (np.isfinite(goal_speed) and goal_speed >= 0):
            raise ValueError(f"goal speed must be a number >= 0 (m per step), got {goal_speed}")
        if goal_speed > 0 and task not in MOVING:
            raise ValueError(f"a moving goal is defined for {', '.join(MOVING)}, not {task}")
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
        self.goal_speed = float(goal_speed)
        self.goal_velocity = np.zeros(2)  # m per step, horizontal

    def reset(self, seed: int) -> StepResult:
        self.env.np_random = np.random.Generator(np.random.PCG64(seed))
        self.observation, _ = self.env.reset()
        angle = np.random.default_rng((seed, GOAL_DIRECTION_STREAM)).uniform(0.0, 2.0 * np.pi)
        self.goal_velocity = self.goal_speed * np.array([np.cos(angle), np.sin(angle)])
        return StepResult(state_vector(self.observation), self.render(), 0.0, False)

    def moving_position(self) -> np.ndarray:
        """(3,) where the moving thing is now: reach's goal point, the button's box."""
        if MOVING[self.task] == "goal":
            return np.array(self.env._target_pos, dtype=np.float64)
        return np.array(self.env.model.body("box").pos, dtype=np.float64)

    def move_goal(self) -> None:
        """One step of the goal's motion (nothing when it stands still)."""
        if self.goal_speed == 0:
            return
        region = self.env._random_reset_space  # the task draws the goal (reach: the last 3 values) or box here
        low, high = region.low[-3:][:2], region.high[-3:][:2]
        before = self.moving_position()
        moved, self.goal_velocity = bounce(before[:2], self.goal_velocity, low, high)
        shift = np.array([moved[0] - before[0], moved[1] - before[1], 0.0])
        if MOVING[self.task] == "goal":
            self.env._target_pos = before + shift
            self.env.model.site("goal").pos = self.env._target_pos
        else:  # the box carries the button; the target (its hole) moves with it
            self.env.model.body("box").pos = before + shift
            self.env._target_pos = np.asarray(self.env._target_pos) + shift

    def step(self, action: np.ndarray) -> StepResult:
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(4), -1.0, 1.0)
        self.move_goal()
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
