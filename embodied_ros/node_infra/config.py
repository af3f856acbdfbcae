"""The graph's configuration: validated dataclasses, loaded from YAML, flattened to ROS parameters.

Every node takes the whole configuration as ROS parameters with dotted names
(`schedule.step_period_s`, `controller.rate_hz`, ...), so `ros2 param describe` documents them and
the launch file, the container and `embodied-ros up` all pass the same values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from embodied_ros.node_infra.paths import config_file

from embodied_ros.node_infra.node_table import NODE_NAMES, node_spec, scheduled_nodes

RELIABILITIES = ("best_effort", "reliable")
IMAGE_TRANSPORTS = ("raw", "compressed")  # image_transport's names: sensor_msgs/Image, or CompressedImage on <topic>/compressed
WIRE_DTYPES = ("float32", "float16", "bfloat16")  # as node_infra/transport.py writes them
IMAGE_CODECS = ("raw", "jpeg", "png")  # how serialized observations carry camera images
HOSTS = ("all", "robot", "inference")  # launch host:=...: every node, or one side of split.robot_nodes


def _doc(text: str, default: Any) -> Any:
    """A setting with its documentation (shown by `ros2 param describe` and written into docs/graph.md)."""
    return field(default=default, metadata={"doc": text})


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class _ScheduleRules:
    """The checks and look-ups of ScheduleConfig, whose fields are made below from the node table."""

    def __post_init__(self) -> None:
        _check(self.mode in ("realtime", "lockstep"), f"schedule.mode must be realtime or lockstep, got {self.mode!r}")
        _check(self.step_period_s > 0, f"schedule.step_period_s must be positive, got {self.step_period_s}")
        for node in scheduled_nodes():
            period = getattr(self, node.schedule_key)
            _check(period >= 1, f"schedule.{node.schedule_key} must be a whole number of steps >= 1, got {period}")
        _check(self.lockstep_start_s > 0, f"schedule.lockstep_start_s must be positive, got {self.lockstep_start_s}")
        _check(self.lockstep_action_delay >= 0,
               f"schedule.lockstep_action_delay must be >= 0 steps, got {self.lockstep_action_delay}")

    def period_of(self, node: str) -> int:
        """Steps between two runs of `node` (1: every step)."""
        key = node_spec(node).schedule_key
        return getattr(self, key) if key else 1


# schedule.*: the step, one period per scheduled node of the node table, lock-step's start
ScheduleConfig = dataclasses.make_dataclass("ScheduleConfig", [
    ("mode", "str", _doc("realtime: stages run at their periods as inputs arrive; lockstep: driven step by step by "
                         "a step clock (/clock)", "realtime")),
    ("step_period_s", "float", _doc("control period: the length of one schedule step, seconds", 0.1)),
    *[(node.schedule_key, "int", _doc(node.schedule_doc, node.schedule_default)) for node in scheduled_nodes()],
    ("lockstep_start_s", "float", _doc("lock-step: /clock time of step 0, seconds (step k is at start + k * period)",
                                       1.0)),
    ("lockstep_action_delay", "int", _doc("lock-step: steps from the observation an action chunk was solved on to "
                                          "the step the controller takes it, as if inference took that long (a "
                                          "chunk that finds none executing lands at once); 0: the same step", 0)),
], bases=(_ScheduleRules,), frozen=True, namespace={"__module__": __name__})


@dataclass(frozen=True)
class InputsConfig:
    cameras: tuple[str, ...] = _doc("model camera names to subscribe (camera/<name>/image_raw); empty: all the "
                                    "model's cameras", ())
    state_joints: tuple[str, ...] = _doc("JointState names giving the model's state, in model order; empty: the "
                                         "model's own state names", ())
    max_age_s: float = _doc("an input older than this is stale: the observation is refused and the arm holds", 0.5)
    max_future_s: float = _doc("an input stamped further ahead of this clock than this (a bad stamp or clock "
                               "skew) is refused and the arm holds; so is an action chunk", 0.1)
    reliability: str = _doc("QoS reliability of the camera and joint-state subscriptions: best_effort (matches "
                            "every publisher) or reliable", "best_effort")
    mono_max: float = _doc("16-bit and float single-channel images: value shown as white (0: 65535 / 1.0)", 0.0)
    image_transport: str = _doc("raw: sensor_msgs/Image on camera/<name>/image_raw; compressed: "
                                "sensor_msgs/CompressedImage (JPEG or PNG) on camera/<name>/image_raw/compressed, "
                                "image_transport's topic, decoded by the observation node", "raw")

    def __post_init__(self) -> None:
        _check(self.max_age_s > 0, f"inputs.max_age_s must be positive, got {self.max_age_s}")
        _check(self.max_future_s >= 0, f"inputs.max_future_s must be >= 0, got {self.max_future_s}")
        _check(self.reliability in RELIABILITIES, f"inputs.reliability must be one of {RELIABILITIES}, "
                                                  f"got {self.reliability!r}")
        _check(self.mono_max >= 0, f"inputs.mono_max must be >= 0, got {self.mono_max}")
        _check(self.image_transport in IMAGE_TRANSPORTS, f"inputs.image_transport must be one of {IMAGE_TRANSPORTS}, "
                                                         f"got {self.image_transport!r}")


@dataclass(frozen=True)
class StagesConfig:
    max_input_age_s: float = _doc("a stage skips its run when the observation behind its input is older", 1.0)
    noise_seed: int = _doc("seed of the action head's (and world predictor's) initial noise; -1: the bundle's "
                           "solver.noise_seed", -1)
    world_frames_every: int = _doc("the world predictor also publishes its prediction's last frame per camera, "
                                   "decoded, as sensor_msgs/Image on embodied/world_frames/<camera>, on every Nth of "
                                   "its runs (models whose runtime decodes frames: lingbot_va); 0: never", 0)

    def __post_init__(self) -> None:
        _check(self.max_input_age_s > 0, f"stages.max_input_age_s must be positive, got {self.max_input_age_s}")
        _check(self.world_frames_every >= 0, f"stages.world_frames_every must be >= 0, got {self.world_frames_every}")
        _check(self.noise_seed >= -1, f"stages.noise_seed must be >= 0, or -1 for the bundle's, got {self.noise_seed}")

    def seed_for(self, spec) -> int:
        """The noise seed in force for a model `spec` (a ModelSpec): this graph's, else its bundle's."""
        return self.noise_seed if self.noise_seed >= 0 else spec.noise_seed


@dataclass(frozen=True)
class ControllerConfig:
    rate_hz: float = _doc("actuator command rate, Hz", 50.0)
    own_process: bool = _doc("composed layout, realtime schedule: run the controller and its input watchdog in a "
                             "process of its own, where the stages' Python cannot delay a command (false: in "
                             "the graph's process)", True)
    realtime_priority: int = _doc("SCHED_FIFO priority (1-99) of the controller's thread when it runs in a process "
                                  "of its own, where permitted (root, CAP_SYS_NICE or an rtprio limit); where not, "
                                  "it says so once and runs at normal priority; 0: normal priority", 50)
    output: str = _doc("joint_trajectory (JointTrajectoryController) or float64_multi_array (forward command "
                       "controller)", "joint_trajectory")
    joints: tuple[str, ...] = _doc("robot joints to command, in output order; empty: the chunk's joint names", ())
    action_columns: tuple[str, ...] = _doc("action column driving each joint; empty: same names as joints", ())
    position_lower: tuple[float, ...] = _doc("per-joint lower position limits: a chunk reaching below is refused "
                                             "and the arm holds; every command is clamped; empty: none", ())
    position_upper: tuple[float, ...] = _doc("per-joint upper position limits: a chunk reaching above is refused "
                                             "and the arm holds; every command is clamped; empty: none", ())
    max_velocity: tuple[float, ...] = _doc("per-joint velocity limits, units per second: a chunk moving faster "
                                           "row to row is refused and the arm holds; every command is "
                                           "rate-limited; empty: none", ())
    max_jump: tuple[float, ...] = _doc("per-joint jump limits: a chunk whose first row is further than this from "
                                       "the joint state, or whose rows step further, is refused and the arm holds; "
                                       "empty: none", ())
    ramp_s: float = _doc("start-up ramp: move from the measured position into the first chunk over at least this "
                         "long, seconds (0 and no ramp_max_velocity: no ramp, the first command is the chunk's)", 1.0)
    ramp_max_velocity: float = _doc("start-up ramp: lengthen it so no joint moves to the first command faster than "
                                    "this, units per second (0: no speed bound)", 0.0)
    dry_run: bool = _doc("publish the commands on embodied/command_preview only, never on the command topic "
                         "(the arm does not move)", False)
    blend_s: float = _doc("blend a new chunk into the executing one over this time (0: switch at once)", 0.0)
    trajectory_points: int = _doc("joint_trajectory output: points per message, the command and the limited "
                                  "targets of the periods after it, each stamped for its instant (1: the command "
                                  "alone)", 1)
    input_timeout_s: float = _doc("hold when no input status has arrived for this long (0: do not watch)", 0.5)

    def __post_init__(self) -> None:
        from embodied_ros.deploy.messages import OUTPUTS

        _check(self.rate_hz > 0, f"controller.rate_hz must be positive, got {self.rate_hz}")
        _check(0 <= self.realtime_priority <= 99,
               f"controller.realtime_priority must be 0 to 99, got {self.realtime_priority}")
        _check(self.output in OUTPUTS, f"controller.output must be one of {OUTPUTS}, got {self.output!r}")
        _check(self.blend_s >= 0, f"controller.blend_s must be >= 0, got {self.blend_s}")
        _check(self.trajectory_points >= 1, f"controller.trajectory_points must be >= 1, got {self.trajectory_points}")
        _check(self.input_timeout_s >= 0, f"controller.input_timeout_s must be >= 0, got {self.input_timeout_s}")
        _check(self.ramp_s >= 0, f"controller.ramp_s must be >= 0, got {self.ramp_s}")
        _check(self.ramp_max_velocity >= 0, f"controller.ramp_max_velocity must be >= 0, got {self.ramp_max_velocity}")
        for name in ("action_columns", "position_lower", "position_upper", "max_velocity", "max_jump"):
            values = getattr(self, name)
            _check(not values or len(values) == len(self.joints),
                   f"controller.{name} has {len(values)} values for {len(self.joints)} joints {list(self.joints)}")


@dataclass(frozen=True)
class RtcConfig:
    enabled: bool = _doc("real-time chunking: the action head guides each new chunk toward what the controller will "
                         "still execute of the current one, and the controller drops the new chunk's rows whose "
                         "instants passed before it landed (flow-matching models: pi0.5, pi0, SmolVLA)", False)
    schedule: str = _doc("weights of the leftover rows after the first d: linear, exp, ones or zeros (LeRobot's "
                         "prefix-attention schedules)", "linear")
    max_guidance_weight: float = _doc("cap on the guidance weight of the early, noisy solver steps", 10.0)
    execution_horizon: int = _doc("leftover rows that guide the new chunk (fewer when less is left)", 10)
    delay: str = _doc("inference delay d the head guides with: measured (the largest over recent chunks of "
                      "observation-to-publication time, in action rows) or fixed (rtc.delay_rows)", "measured")
    delay_rows: int = _doc("fixed inference delay, action rows", 0)
    delay_window: int = _doc("measured delay: the largest over this many recent chunks", 10)

    def __post_init__(self) -> None:
        from embodied_ros.heads.rtc import SCHEDULES

        _check(self.schedule in SCHEDULES, f"rtc.schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        _check(0 < self.max_guidance_weight < float("inf"),
               f"rtc.max_guidance_weight must be a positive number, got {self.max_guidance_weight}")
        _check(self.execution_horizon >= 0, f"rtc.execution_horizon must be >= 0 rows, got {self.execution_horizon}")
        _check(self.delay in ("measured", "fixed"), f"rtc.delay must be measured or fixed, got {self.delay!r}")
        _check(self.delay_rows >= 0, f"rtc.delay_rows must be >= 0, got {self.delay_rows}")
        _check(self.delay_window >= 1, f"rtc.delay_window must be >= 1, got {self.delay_window}")

    @property
    def settings(self):
        from embodied_ros.heads.rtc import RtcSettings

        return RtcSettings(self.schedule, self.max_guidance_weight, self.execution_horizon)


@dataclass(frozen=True)
class TransportConfig:
    mode: str = _doc("how stage outputs travel: reference (same process, zero-copy), serialized (Tensor "
                     "messages) or auto (reference when composed)", "auto")
    keep_last: int = _doc("outputs per stage kept alive for by-reference consumers", 8)
    wire_dtype: str = _doc("serialized stage outputs: the type their float32 arrays (image tokens, prefix K/V) "
                           "travel in, float32 (exact), float16 or bfloat16 (half the bytes; received back as "
                           "float32); observations and action chunks always travel exact", "float32")
    image_codec: str = _doc("serialized observations: how their camera images travel, raw (exact), png (exact, "
                            "smaller) or jpeg (at transport.jpeg_quality: a 224x224 image in ~10 KB instead of "
                            "150 KB, for slow links between hosts)", "raw")
    jpeg_quality: int = _doc("image_codec jpeg: the JPEG quality, 1-95", 90)

    def __post_init__(self) -> None:
        _check(self.mode in ("auto", "reference", "serialized"),
               f"transport.mode must be auto, reference or serialized, got {self.mode!r}")
        _check(self.keep_last >= 2, f"transport.keep_last must be >= 2, got {self.keep_last}")
        _check(self.wire_dtype in WIRE_DTYPES, f"transport.wire_dtype must be one of {WIRE_DTYPES}, "
                                               f"got {self.wire_dtype!r}")
        _check(self.image_codec in IMAGE_CODECS, f"transport.image_codec must be one of {IMAGE_CODECS}, "
                                                 f"got {self.image_codec!r}")
        _check(1 <= self.jpeg_quality <= 95, f"transport.jpeg_quality must be 1-95, got {self.jpeg_quality}")


@dataclass(frozen=True)
class SplitConfig:
    robot_nodes: tuple[str, ...] = _doc("the graph split over two hosts (launch host:=robot|inference): the nodes "
                                        "the robot's computer runs, the inference host runs the others; the "
                                        "default puts the whole model on the inference host, so only observations "
                                        "and action chunks cross the link", ("observation", "controller"))

    def __post_init__(self) -> None:
        unknown = [name for name in self.robot_nodes if name not in NODE_NAMES]
        _check(not unknown, f"split.robot_nodes {unknown} are not graph nodes {list(NODE_NAMES)}")
        _check("controller" in self.robot_nodes, "split.robot_nodes must include the controller: it commands the arm")

    def nodes_of(self, host: str) -> tuple[str, ...]:
        """The graph nodes `host` runs (all, robot or inference), in start-up order."""
        _check(host in HOSTS, f"host must be one of {HOSTS}, got {host!r}")
        return tuple(name for name in NODE_NAMES
                     if host == "all" or (name in self.robot_nodes) == (host == "robot"))



@dataclass(frozen=True)
class DiagnosticsConfig:
    period_s: float = _doc("how often each node publishes /diagnostics, seconds", 1.0)
    window_s: float = _doc("rates and percentiles are taken over this recent window, seconds", 10.0)

    def __post_init__(self) -> None:
        _check(self.period_s > 0, f"diagnostics.period_s must be positive, got {self.period_s}")
        _check(self.window_s > 0, f"diagnostics.window_s must be positive, got {self.window_s}")


@dataclass(frozen=True)
class SyntheticConfig:
    camera_rate_hz: float = _doc("synthetic source: camera frame rate, Hz", 15.0)
    joint_state_rate_hz: float = _doc("synthetic source: joint-state rate of the simulated arm, Hz", 100.0)
    arm_time_constant_s: float = _doc("synthetic source: the arm follows commands with this first-order lag", 0.05)
    instruction: str = _doc("synthetic source: the task instruction", "pick up the red cube")

    def __post_init__(self) -> None:
        for name in ("camera_rate_hz", "joint_state_rate_hz", "arm_time_constant_s"):
            _check(getattr(self, name) > 0, f"synthetic.{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class ComputeConfig:
    blas_threads: int = _doc("threads of the BLAS library in each graph process, for products large enough to split "
                             "(smaller ones run on one). 0: every core where the stages' model calls take turns "
                             "(composed, compute.stage_turns, realtime), one where calls run at once (separate "
                             "processes, or turns off), so that parallel calls do not fight over the cores, and in "
                             "lock-step (the same chunks bit for bit in either layout); N: N threads", 0)
    stage_nice: int = _doc("added to the nice value of each stage's compute thread (and its kernels' threads), so "
                           "the inputs, the middleware and the controller get a core at once when every core "
                           "computes; 0: the stages run at the graph's priority", 5)
    stage_turns: bool = _doc("the stages of one process make their model calls in turn, not at once: each call's "
                             "parallel kernels use every core, so calls at once only take the cores from one "
                             "another; calls go in the order they asked, except that a stage's output hands the "
                             "turn to the stage it feeds (false: at once)",
                             True)
    stall_exit_s: float = _doc("a graph process whose Python interpreter stays held this long (a call into the "
                               "middleware or a kernel that never returns) writes every thread's stack to its log "
                               "and exits with status 1, for launch's respawn or a supervisor to restart it; 0: "
                               "never", 30.0)

    def __post_init__(self) -> None:
        _check(self.blas_threads >= 0, f"compute.blas_threads must be >= 0, got {self.blas_threads}")
        _check(self.stall_exit_s >= 0, f"compute.stall_exit_s must be >= 0, got {self.stall_exit_s}")
        _check(0 <= self.stage_nice <= 19, f"compute.stage_nice must be 0 to 19, got {self.stage_nice}")


@dataclass(frozen=True)
class GraphConfig:
    bundle: str = _doc("model bundle file (relative paths are taken from the config file's folder)", "")
    backend: str = _doc("kernel backend: numba (CPU), numpy (reference, slow) or cuda (NVIDIA GPU, CuPy)", "numba")
    layout: str = _doc("composed: all nodes in one process; separate: one process per node", "composed")
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    inputs: InputsConfig = field(default_factory=InputsConfig)
    stages: StagesConfig = field(default_factory=StagesConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    rtc: RtcConfig = field(default_factory=RtcConfig)
    transport: TransportConfig = field(default_factory=TransportConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)

    def __post_init__(self) -> None:
        _check(self.layout in ("composed", "separate"), f"layout must be composed or separate, got {self.layout!r}")
        _check(self.backend in ("numba", "numpy", "cuda"), f"backend must be numba, numpy or cuda, "
                                                           f"got {self.backend!r}")
        timeout, step = self.controller.input_timeout_s, self.schedule.step_period_s
        _check(timeout == 0 or timeout > step, f"controller.input_timeout_s ({timeout}) must exceed "
                                               f"schedule.step_period_s ({step}): the input status comes once a step")

    @property
    def by_reference(self) -> bool:
        if self.transport.mode == "auto":
            return self.layout == "composed"
        return self.transport.mode == "reference"


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> GraphConfig:
    """Config from a YAML file or a shipped config's name (None: all defaults), then dotted overrides
    like {"schedule.prefix": 2}."""
    values: dict[str, Any] = {}
    if path is not None:
        path = config_file(path)
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (UnicodeDecodeError, yaml.YAMLError) as error:  # a binary file, or broken YAML
            raise ValueError(f"{path}: not a YAML config: {' '.join(str(error).split())}") from None
        _check(isinstance(loaded, dict), f"{path}: the config must be a mapping, got {type(loaded).__name__}")
        values = loaded
        bundle = values.get("bundle")
        if isinstance(bundle, str) and bundle and not Path(bundle).is_absolute():
            values["bundle"] = str((path.parent / bundle).resolve())
    flat = flatten(values)
    flat.update(overrides or {})
    return from_flat(flat)


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def from_flat(flat: Mapping[str, Any]) -> GraphConfig:
    """GraphConfig from dotted names; unknown names and wrong types are errors that name the key."""
    known = {name for name, _ in parameter_fields()}
    unknown = sorted(set(flat) - known)
    _check(not unknown, f"unknown config key(s) {unknown}; known keys: {sorted(known)}")
    sections: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for name, spec in parameter_fields():
        if name not in flat or flat[name] is None:
            continue
        value = _coerce(name, flat[name], spec.type)
        if "." in name:
            section, key = name.split(".", 1)
            sections.setdefault(section, {})[key] = value
        else:
            top[name] = value
    section_types = {f.name: f.default_factory for f in dataclasses.fields(GraphConfig)
                     if f.default_factory is not dataclasses.MISSING}
    for section, values in sections.items():
        top[section] = section_types[section](**values)
    return GraphConfig(**top)


def parameter_fields() -> list[tuple[str, dataclasses.Field]]:
    """Every leaf setting as (dotted name, dataclass field), in declaration order."""
    leaves = []
    for outer in dataclasses.fields(GraphConfig):
        if outer.default_factory is not dataclasses.MISSING:
            for inner in dataclasses.fields(outer.default_factory):
                leaves.append((f"{outer.name}.{inner.name}", inner))
        else:
            leaves.append((outer.name, outer))
    return leaves


def to_parameters(config: GraphConfig) -> dict[str, Any]:
    """Dotted name -> value, with lists for tuples and floats kept floats (ROS parameters are typed)."""
    flat = {}
    for name, spec in parameter_fields():
        owner = config
        for part in name.split("."):
            owner = getattr(owner, part)
        flat[name] = list(owner) if isinstance(owner, tuple) else owner
    return flat


def _coerce(name: str, value: Any, annotation: str) -> Any:
    if annotation == "float":
        _check(isinstance(value, (int, float)) and not isinstance(value, bool),
               f"{name} must be a number, got {value!r}")
        return float(value)
    if annotation == "int":
        _check(isinstance(value, int) and not isinstance(value, bool), f"{name} must be an integer, got {value!r}")
        return value
    if annotation == "str":
        _check(isinstance(value, str), f"{name} must be a string, got {value!r}")
        return value
    if annotation == "bool":
        _check(isinstance(value, bool), f"{name} must be true or false, got {value!r}")
        return value
    item = annotation[len("tuple["):].split(",")[0]
    _check(isinstance(value, (list, tuple)), f"{name} must be a list, got {value!r}")
    return tuple(_coerce(f"{name}[{i}]", v, item) for i, v in enumerate(value))
