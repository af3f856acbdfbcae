"""How the graph's nodes are driven: free-running or lock-step, one policy object per mode.

A node gets its drive once, at configure, from `schedule.mode` (`drive_for`); it then asks the
drive instead of testing the mode itself. The drive decides

- when the node runs: on its own timers (`timer`) or on the steps of /clock (`follow_clock`,
  which calls the node's `on_step(step)`);
- what it reads: of the two readers a node has for an input, the newest value or the value of a
  given step, `reader` returns the one for this mode;
- how it stamps: `output_stamp` (the step's time, or the clock's now), `noise_index` (the step,
  or the run's sequence number), and whether input is too old to use (`too_old`);
- how long an action chunk takes to land at the controller beyond its step: `landing_delay_steps`
  (lock-step's simulated inference delay, `schedule.lockstep_action_delay`; free-running, the
  real one is measured);
- whether a node reads the inputs of which only the newest message counts (cameras, joint states)
  when it needs them (`polls_newest`, free-running) or by a callback per message (lock-step:
  step k's message, not the newest);
- which QoS its topics use (`sensor_qos`, `stage_qos`, `command_qos`, `status_qos`, `timing_qos`);
- what it acknowledges: lock-step, a step the node made nothing for still gets a skip marker
  (`skipped` calls the node's `publish_skip_marker(step, now_ns)`), so consumers stop waiting.

A node using a drive offers `ros_timer(period_s, callback)`, `subscribe(type, topic, callback, qos)`,
`on_step(step)` and `publish_skip_marker(step, now_ns)`, as `nodes.base.GraphNode` does.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from rclpy.qos import QoSProfile
from rosgraph_msgs.msg import Clock

from embodied_ros.inputs.stamps import seconds_to_ns, time_to_ns
from embodied_ros.node_infra.config import ScheduleConfig
from embodied_ros.node_infra.schedule import StepClock
from embodied_ros.node_infra.topics import (
    CLOCK, CLOCK_QOS, command_qos, sensor_qos, stage_qos, status_qos, timing_qos,
)


class Drive:
    """What every drive answers; `FreeRunning` and `LockStep` are the two there are."""

    mode = ""
    uses_sim_time = False  # True: the nodes' ROS clock is /clock (use_sim_time)
    input_reliability_configurable = True  # sensor QoS follows inputs.reliability
    keeps_every_message = False  # links reliable, transient local, deep (topics.lockstep_qos)
    polls_newest = False  # inputs of which only the newest counts are read when needed (node_infra/polled.py)

    landing_delay_steps = 0

    def __init__(self, schedule: ScheduleConfig):
        self.step_clock = StepClock(seconds_to_ns(schedule.lockstep_start_s), seconds_to_ns(schedule.step_period_s))

    @property
    def landing_delay_ns(self) -> int:
        return self.landing_delay_steps * self.step_clock.period_ns

    def follow_clock(self, node) -> None:
        """Make /clock's steps call `node.on_step(step)`, or nothing."""
        raise NotImplementedError

    def timer(self, node, period_s: float, callback: Callable[[], None]):
        """The node's timer for `callback` (a ROS timer of the node), or None."""
        raise NotImplementedError

    def reader(self, by_step: Callable[..., None], newest: Callable[..., None]) -> Callable[..., None]:
        """Of a node's two ways to take an input, by its step or as the newest, the one to use."""
        raise NotImplementedError

    def output_stamp(self, step_ns: int, now: Callable[[], int]) -> int:
        """The stamp of an output made for the step at `step_ns`; `now` reads the node's clock."""
        raise NotImplementedError

    def noise_index(self, step: int, sequence: int) -> int:
        """Which noise draw (pipeline/noise.py) the run for `step`, the node's run `sequence` + 1, uses."""
        raise NotImplementedError

    def too_old(self, age_ns: int, limit_ns: int) -> bool:
        """Whether an input `age_ns` old is refused (`limit_ns`: the configured limit)."""
        raise NotImplementedError

    def skipped(self, node, step: int, now_ns: int) -> None:
        """The node made nothing for `step`: tell its consumers, or nobody."""
        raise NotImplementedError

    def sensor_qos(self, reliability: str) -> QoSProfile:
        return sensor_qos(reliability, self.keeps_every_message)

    def stage_qos(self) -> QoSProfile:
        return stage_qos(self.keeps_every_message)

    def command_qos(self) -> QoSProfile:
        return command_qos(self.keeps_every_message)

    def status_qos(self) -> QoSProfile:
        return status_qos(self.keeps_every_message)

    def timing_qos(self) -> QoSProfile:
        return timing_qos(self.keeps_every_message)


class FreeRunning(Drive):
    """`schedule.mode: realtime`: timers and arriving input make nodes run, on the newest input."""

    mode = "realtime"
    polls_newest = True

    def follow_clock(self, node) -> None:
        pass  # the node's timers drive it

    def timer(self, node, period_s: float, callback: Callable[[], None]):
        return node.ros_timer(period_s, callback)

    def reader(self, by_step: Callable[..., None], newest: Callable[..., None]) -> Callable[..., None]:
        return newest

    def output_stamp(self, step_ns: int, now: Callable[[], int]) -> int:
        return now()

    def noise_index(self, step: int, sequence: int) -> int:
        return sequence + 1

    def too_old(self, age_ns: int, limit_ns: int) -> bool:
        return age_ns > limit_ns

    def skipped(self, node, step: int, now_ns: int) -> None:
        pass  # nobody waits for a step; the node counts the skip


class LockStep(Drive):
    """`schedule.mode: lockstep`: no timers; each step of /clock runs the node on that step's inputs,
    stamped with the step's time, on links that keep every message."""

    mode = "lockstep"
    uses_sim_time = True
    input_reliability_configurable = False  # lock-step links are always reliable
    keeps_every_message = True

    def __init__(self, schedule: ScheduleConfig):
        super().__init__(schedule)
        self.landing_delay_steps = schedule.lockstep_action_delay

    def follow_clock(self, node) -> None:
        node.subscribe(Clock, CLOCK, partial(self._on_clock, node), CLOCK_QOS)

    def timer(self, node, period_s: float, callback: Callable[[], None]):
        return None

    def reader(self, by_step: Callable[..., None], newest: Callable[..., None]) -> Callable[..., None]:
        return by_step

    def output_stamp(self, step_ns: int, now: Callable[[], int]) -> int:
        return step_ns

    def noise_index(self, step: int, sequence: int) -> int:
        return step

    def too_old(self, age_ns: int, limit_ns: int) -> bool:
        return False  # step k reads exactly the outputs scheduled for it, however long they took

    def skipped(self, node, step: int, now_ns: int) -> None:
        node.publish_skip_marker(step, now_ns)  # consumers of this step must not wait for an output that will not come

    def _on_clock(self, node, msg: Clock) -> None:
        step = self.step_clock.step_of(time_to_ns(msg.clock))
        if step is not None and node.active:
            node.on_step(step)


DRIVES: dict[str, type[Drive]] = {FreeRunning.mode: FreeRunning, LockStep.mode: LockStep}


def drive_for(schedule: ScheduleConfig) -> Drive:
    """The drive of `schedule.mode` (the config has checked the mode is one of DRIVES)."""
    return DRIVES[schedule.mode](schedule)
