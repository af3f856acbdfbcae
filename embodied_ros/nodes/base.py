"""What every node of the graph shares: lifecycle, config from parameters, timing and diagnostics.

Lifecycle: configure reads the parameters, loads what the node needs (the bundle, kernels) and
creates its publishers and subscriptions; activate starts its timers; deactivate stops them;
cleanup releases everything. A failing configure logs why and leaves the node unconfigured.
From configure on, /diagnostics go out from a thread of their own, on time even while the node
computes in its executor's thread.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter

from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.node_infra.drive import Drive, drive_for
from embodied_ros.node_infra.polled import PolledGroup, PolledSubscription, ignore_message
from embodied_ros.node_infra.schedule import StepClock
from embodied_ros.node_infra.spinning import PeriodicThread
from embodied_ros.node_infra.stats import StageStats
from embodied_ros.node_infra.topics import DIAGNOSTICS, DIAGNOSTICS_QOS, TIMING
from embodied_ros.node_infra.transport import PROCESS_STORE, ResultStore, timing_msg
from embodied_ros.msg import StageTiming
from embodied_ros.nodes.params import declare_config, read_config
from embodied_ros.pipeline.stages import Runtime

HARDWARE_ID = "embodied_ros"


class GraphNode(LifecycleNode):
    stage = ""  # name in timings and diagnostics; subclasses set it
    config: GraphConfig
    stats: StageStats
    step_clock: StepClock
    drive: Drive  # free-running or lock-step (node_infra/drive.py), from schedule.mode
    runs_alone = False  # True: the only node of its process (nodes/run.py)

    def __init__(self, node_name: str | None = None, *, runtime: Runtime | None = None,
                 store: ResultStore | None = None, parameters: dict[str, Any] | None = None, **node_kwargs):
        overrides = [Parameter(name, value=value) for name, value in (parameters or {}).items()]
        super().__init__(node_name or self.stage, parameter_overrides=overrides, **node_kwargs)
        declare_config(self)
        self.injected_runtime = runtime  # tests and in-process graphs may hand over a runtime
        self.store = store or PROCESS_STORE
        self.configured = False  # configure read the configuration; cleanup or shutdown since: False
        self.active = False
        self.work_group = MutuallyExclusiveCallbackGroup()  # data callbacks: one at a time
        self.polled_group = PolledGroup()
        self._polled: list[PolledSubscription] = []
        self._entities: list[tuple[Callable[[Any], Any], Any]] = []
        self._diagnostics_thread: PeriodicThread | None = None

    # lifecycle ----------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.config = read_config(self)
            self.drive = drive_for(self.config.schedule)
            self.step_clock = self.drive.step_clock
            self.stats = StageStats(self.config.diagnostics.window_s)
            self.timing_publisher = self.lifecycle_publisher(StageTiming, TIMING, self.drive.timing_qos())
            self.diagnostics_publisher = self.create_publisher(DiagnosticArray, DIAGNOSTICS, DIAGNOSTICS_QOS)
            self._entities.append((self.destroy_publisher, self.diagnostics_publisher))
            self.drive.follow_clock(self)
            self.setup()
            self._diagnostics_thread = PeriodicThread(self.config.diagnostics.period_s, self._report,
                                                      f"{self.get_name()}-diagnostics",
                                                      prepare=self.prepare_diagnostics_thread)
            self._diagnostics_thread.start()
        except Exception as error:  # any failure to configure is reported, never raised into the executor
            self.get_logger().error(f"configure failed: {error}")
            self._destroy_entities()
            return TransitionCallbackReturn.FAILURE
        self.configured = True
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = True
        self.start()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self.stop()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.configured = False
        result = super().on_cleanup(state)
        self._destroy_entities()
        return result

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = self.configured = False
        result = super().on_shutdown(state)
        self._destroy_entities()
        return result

    # for subclasses -----------------------------------------------------------------------------

    def setup(self) -> None:
        """Load resources, create publishers and subscriptions (configure)."""

    def start(self) -> None:
        """Start timers (activate)."""

    def stop(self) -> None:
        """Stop timers (deactivate)."""

    def prepare_spin_thread(self) -> None:
        """On the thread that will spin this node's executor, before it spins (run alone, nodes/run.py):
        before configure, unless `autostart` configured the node already; a lifecycle manager's
        configure comes later, served by this thread."""

    def prepare_diagnostics_thread(self) -> None:
        """On the diagnostics thread, before its first report."""

    def on_step(self, step: int) -> None:
        """Lock-step: step `step` began."""

    def publish_skip_marker(self, step: int, now_ns: int) -> None:
        """Lock-step: this node made nothing for `step` (the drive calls this); nodes with outputs add theirs."""
        self.publish_timing(step, 0, 0, 0.0, float("nan"), now_ns)

    def extra_diagnostics(self) -> dict[str, str]:
        return {}

    def now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def lifecycle_publisher(self, msg_type, topic: str, qos):
        publisher = self.create_lifecycle_publisher(msg_type, topic, qos)
        self._entities.append((self.destroy_lifecycle_publisher, publisher))
        return publisher

    def subscribe(self, msg_type, topic: str, callback, qos, event_callbacks=None):
        subscription = self.create_subscription(msg_type, topic, callback, qos, callback_group=self.work_group,
                                                event_callbacks=event_callbacks)
        self._entities.append((self.destroy_subscription, subscription))
        return subscription

    def subscribe_newest(self, msg_type, topic: str, callback, qos, event_callbacks=None):
        """An input of which only the newest message counts (a camera, joint states). Free-running it is
        polled: `poll_newest()` hands the newest message that came since the last poll to `callback`,
        and no message wakes the node (node_infra/polled.py); lock-step every message goes to
        `callback` as it comes. Either way the result has the subscription's topic_name and qos_profile."""
        if not self.drive.polls_newest:
            return self.subscribe(msg_type, topic, callback, qos, event_callbacks)
        subscription = self.create_subscription(msg_type, topic, ignore_message, qos, callback_group=self.polled_group,
                                                event_callbacks=event_callbacks)
        self._entities.append((self.destroy_subscription, subscription))
        polled = PolledSubscription(subscription, callback)
        self._polled.append(polled)
        return polled

    def poll_newest(self) -> None:
        """Take the newest message of each polled input (`subscribe_newest`) to its callback."""
        for polled in self._polled:
            polled.poll()

    def ros_timer(self, period_s: float, callback):
        """A timer on the node's ROS clock (simulated time when use_sim_time is set)."""
        timer = self.create_timer(period_s, callback, callback_group=self.work_group)
        self._entities.append((self.destroy_timer, timer))
        return timer

    def drop(self, entity) -> None:
        """Destroy one entity made by the helpers above (e.g. a timer on deactivate)."""
        for i, (destroy, owned) in enumerate(self._entities):
            if owned is entity:
                del self._entities[i]
                destroy(owned)
                return

    def publish_timing(self, step: int, sequence: int, observation_stamp_ns: int, compute_ms: float,
                       staleness_ms: float, now_ns: int) -> None:
        self.timing_publisher.publish(timing_msg(self.stage, sequence, step, observation_stamp_ns, compute_ms,
                                                 staleness_ms, now_ns))

    def diagnostic_status(self) -> DiagnosticStatus:
        name = f"{self.get_fully_qualified_name()}: {self.stage}"
        status = self.stats.status(name, HARDWARE_ID, time.monotonic_ns(), self.extra_diagnostics())
        if not self.active:
            status.level, status.message = DiagnosticStatus.WARN, "inactive"
        return status

    def publish_diagnostics(self) -> None:
        array = DiagnosticArray(status=[self.diagnostic_status()])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_publisher.publish(array)

    def destroy_node(self) -> None:
        self._stop_diagnostics()
        super().destroy_node()

    # internals ----------------------------------------------------------------------------------

    def _report(self) -> None:
        """The diagnostics thread's call: a failure is logged, never raised (the thread keeps going)."""
        try:
            self.publish_diagnostics()
        except Exception as error:
            if self.context.ok():  # after Ctrl-C the context is gone: nothing to report to
                self.get_logger().error(f"publishing diagnostics failed: {error}", throttle_duration_sec=10.0)

    def _stop_diagnostics(self) -> None:
        if self._diagnostics_thread is not None:
            self._diagnostics_thread.stop()
            self._diagnostics_thread = None

    def _destroy_entities(self) -> None:
        self._stop_diagnostics()  # before its publisher goes
        self._polled.clear()
        while self._entities:
            destroy, entity = self._entities.pop()
            destroy(entity)
