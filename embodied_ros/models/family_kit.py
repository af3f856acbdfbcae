"""What every model family shares: recorded-case running, bundle sections, LeRobot-save reading.

A family's parity.py, config.py, convert.py and runtime.py hold only what differs between families;
the record layouts, the tolerance rule, the config <-> bundle section split and the reading of a
LeRobot save live here once.

Tolerances on the max abs action error, by the weakest stored type of a bundle (flow-matching VLAs:
pi0.5, pi0, SmolVLA): f32 1e-4 (the parity requirement), f16 5e-3, bf16 5e-2, q8_0 1e-1, q4_k 3e-1.
The others are about 3x the worst error measured with every weight group stored in that type on
the random-weight pi0.5 reference records (actions up to ~5 in size): f16 1.2e-3, bf16 1.2e-2,
q8_0 3.1e-2, q4_k 8.9e-2 (pi05_small; the tiny records' widths are not multiples of 256, so
their "q4_k" falls back to q8_0). They catch a broken kernel or layout, not small accuracy changes.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from embodied_ros.backbone.checks import positive, require
from embodied_ros.heads import rtc
from embodied_ros.pipeline.stages import ModelSpec, infer
from embodied_ros.pipeline.types import ChunkContinuation, Observation

TOLERANCES = {"f32": 1e-4, "f16": 5e-3, "bf16": 5e-2, "q8_0": 1e-1, "q4_k": 3e-1}
_STRENGTH = ("f32", "f16", "bf16", "q8_0", "q4_k")  # weakest last
CASES_FILE = "cases.npz"
CHECKPOINT_FOLDER = "checkpoint"
PIPELINE_CASES = "cases.json"
ROBOT_KEYS = ("state_names", "action_names", "action_period_s")  # a config's robot metadata section


# ---- configs and their bundle sections ------------------------------------------------------

class ActionChunkConfig:
    """What a flow-matching VLA's config dataclass derives from its fields: state and action sizes,
    the LM's embedding scale, and the checks every such config makes."""

    relative_action_mask: tuple[bool, ...] = ()  # absolute actions, unless the family's config has the field

    @property
    def action_dim(self) -> int:
        return len(self.action_names)

    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.lm.width)

    def check_chunk_settings(self, family: str) -> None:
        """Sizes positive, cameras present and distinct, names within the padded sizes, a positive
        control period, ordered time periods and an even expert width (sin/cos time embedding)."""
        positive(family, vocab_size=self.vocab_size, chunk_size=self.chunk_size, max_action_dim=self.max_action_dim,
                 max_state_dim=self.max_state_dim, num_inference_steps=self.num_inference_steps,
                 tokenizer_max_length=self.tokenizer_max_length)
        require(len(self.camera_names) > 0, f"{family} needs at least one camera")
        require(len(set(self.camera_names)) == len(self.camera_names), f"camera names repeat: {self.camera_names}")
        require(0 < len(self.action_names) <= self.max_action_dim,
                f"{len(self.action_names)} action names for max_action_dim {self.max_action_dim}")
        require(len(self.state_names) <= self.max_state_dim,
                f"{len(self.state_names)} state names for max_state_dim {self.max_state_dim}")
        require(self.action_period_s > 0, f"action_period_s must be positive, got {self.action_period_s}")
        require(0 < self.time_min_period < self.time_max_period,
                f"time periods must satisfy 0 < min < max, got {self.time_min_period}, {self.time_max_period}")
        width = self.expert.width
        require(width % 2 == 0, f"expert width must be even (sin/cos time embedding), got {width}")


def plain_config(config, tuple_fields: tuple[str, ...]) -> dict[str, Any]:
    """A config dataclass as plain nested values (JSON-safe), its tuple fields as lists."""
    values = asdict(config)
    for key in tuple_fields:
        values[key] = list(values[key])
    return values


def config_from_plain(cls, values: Mapping[str, Any], family: str, nested: Mapping[str, type]):
    """`cls` from `plain_config` values; the fields in `nested` are built from their own dicts first."""
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    require(not unknown, f"unknown {family} config keys: {unknown}")
    values = dict(values)
    try:
        for key, kind in nested.items():
            values[key] = kind(**values[key])
        return cls(**values)
    except (KeyError, TypeError) as error:
        raise ValueError(f"incomplete or malformed {family} config: {error}") from None


def split_bundle_sections(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Plain config values -> (model config, solver settings, robot metadata) as a bundle stores them."""
    values = dict(values)
    solver = {"method": "euler", "num_inference_steps": values.pop("num_inference_steps"),
              "noise_seed": values.pop("noise_seed")}
    robot = {key: values.pop(key) for key in ROBOT_KEYS}
    return values, solver, robot


def join_bundle_sections(family: str, model: Mapping[str, Any], solver: Mapping[str, Any],
                         robot: Mapping[str, Any], default_noise_seed: int) -> dict[str, Any]:
    """A bundle's (model config, solver settings, robot metadata) -> the plain values of its config."""
    method = solver.get("method", "euler")
    require(method == "euler", f"{family} runs the Euler solver; the bundle asks for {method!r}")
    values = dict(model)
    values["num_inference_steps"] = solver["num_inference_steps"]
    values["noise_seed"] = solver.get("noise_seed", default_noise_seed)
    values.update({key: robot[key] for key in ROBOT_KEYS})
    return values


# ---- a runtime's bundle metadata -> config -> spec -----------------------------------------

def config_of(bundle, config_type):
    """The model config from a bundle's metadata alone (no weights read)."""
    robot = bundle.robot
    if robot is None:
        raise ValueError(f"{bundle.path}: {bundle.architecture} bundle lacks robot metadata "
                         "(state/action names, action period)")
    return config_type.from_bundle_sections(
        bundle.config, bundle.solver,
        {"state_names": robot.state_names, "action_names": robot.action_names,
         "action_period_s": robot.action_period_s})


def action_model_spec(config, architecture: str, real_time_chunking: bool = False) -> ModelSpec:
    """The stage contract's spec of a VLA that samples an action chunk from noise [chunk, max_action_dim]."""
    size = config.vision.image_size
    return ModelSpec(
        architecture=architecture, camera_names=config.camera_names, image_size=(size, size),
        state_names=config.state_names, action_names=config.action_names, chunk_size=config.chunk_size,
        action_period_s=config.action_period_s, noise_shape=(config.chunk_size, config.max_action_dim),
        world_noise_shape=None, has_world_model=False, real_time_chunking=real_time_chunking,
        noise_seed=config.noise_seed)


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


# ---- recorded cases ------------------------------------------------------------------------

@dataclass(frozen=True)
class CaseResult:
    name: str  # "case0", ...
    max_abs_error: float
    tolerance: float
    detail: str = ""  # what else differed (prompt, token ids), empty when nothing did

    @property
    def passed(self) -> bool:
        return self.max_abs_error <= self.tolerance


def tolerance_for(stored_types, tolerances: Mapping[str, float] = TOLERANCES) -> float:
    weakest = max((t for t in stored_types if t in tolerances), key=_STRENGTH.index, default="f32")
    return tolerances[weakest]


def case_count(cases) -> int:
    return len({name.split("_")[0] for name in cases.files if name.startswith("case") and name.endswith("_noise")})


def rtc_case_settings(case: dict) -> rtc.RtcSettings | None:
    """The RTC settings of a recorded case (LeRobot's RTCConfig); None when RTC is off."""
    config = case.get("rtc_config")
    if not config or not config.get("enabled", True):
        return None
    return rtc.RtcSettings(config["prefix_attention_schedule"].lower(), float(config["max_guidance_weight"]),
                           int(config["execution_horizon"]))


def rtc_case_leftover(case: dict, cases, k: int, outputs: Mapping[int, np.ndarray]) -> np.ndarray | None:
    """The leftover of case k: recorded, or for a chained case this runtime's own earlier output."""
    source = case.get("prev_chunk_left_over")
    if source is None:
        return None
    if source.get("source") == "previous chain chunk":
        leftover = outputs[source["case"]][source["rows_from"]:]
        return rtc.fit_rows(leftover, source["normalized_to_rows"])
    return cases[f"case{k}_prev_chunk_left_over"]


def model_record_cases(model, folder: Path, tolerance: float, prefix_of: Callable[[Any, Any, str], Any]
                       ) -> Iterator[CaseResult]:
    """Model-space record of a flow-matching family: inputs + noise (+ a real-time chunking
    leftover) -> actions, compared in model space. `prefix_of(model, cases, "case{k}")` builds the
    case's prefix cache from its recorded inputs.

    A real-time chunking (RTC) record adds, per case, config.json `cases[k]` {rtc_config,
    inference_delay, prev_chunk_left_over, expect} and `case{k}_prev_chunk_left_over`; a chained
    case takes its leftover from this runtime's own output for the case it names, as a live loop
    would; a case that expects plain sampling must equal this runtime's plain sampling bit for bit.
    """
    recorded = json.loads((Path(folder) / "config.json").read_text()).get("cases", [])
    outputs: dict[int, np.ndarray] = {}
    with np.load(Path(folder) / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            cache = prefix_of(model, cases, f"case{k}")
            expected, noise = cases[f"case{k}_actions"], cases[f"case{k}_noise"]
            case = recorded[k] if k < len(recorded) and isinstance(recorded[k], dict) else {}
            guidance = None
            if "rtc_config" in case:
                leftover = rtc_case_leftover(case, cases, k, outputs)
                guidance = rtc.chunk_guidance(rtc_case_settings(case), leftover, int(case["inference_delay"]),
                                              noise.shape, model.config.num_inference_steps)
            actions = model.sample_actions(cache, noise, guidance)[:, : expected.shape[1]]
            outputs[k] = actions
            error, detail = float(np.abs(actions - expected).max()), ""
            if case.get("expect") == "plain":
                plain = model.sample_actions(cache, noise)[:, : expected.shape[1]]
                if not np.array_equal(actions, plain):
                    error, detail = float("inf"), "RTC no-op case differs from plain sampling"
            yield CaseResult(f"case{k}", error, tolerance, detail)


def record_kind(folder: Path, detect: Callable[[Path], Any]) -> str | None:
    """"model", "pipeline" or None for a folder that is not a record of the family `detect` recognizes."""
    folder = Path(folder)
    if not (folder / CASES_FILE).is_file():
        return None
    checkpoint = folder / CHECKPOINT_FOLDER
    if checkpoint.is_dir() and detect(checkpoint) and (folder / PIPELINE_CASES).is_file():
        return "pipeline"
    if detect(folder):
        return "model"
    return None


def require_kind(folder: Path, kind: str | None, family: str) -> str:
    if kind is None:
        raise ValueError(f"{folder}: not a {family} record (needs {CASES_FILE} beside a checkpoint)")
    return kind


def checkpoint_of(folder: Path, kind: str | None) -> Path:
    return Path(folder) / CHECKPOINT_FOLDER if kind == "pipeline" else Path(folder)


def recorded_tasks(folder: Path) -> list[dict]:
    """The per-case entries (task, prompt) of a pipeline record's cases.json."""
    return json.loads((Path(folder) / PIPELINE_CASES).read_text())["cases"]


def pipeline_observation(inputs, task: str, key: str, camera_names, stamp_ns: int = 0) -> Observation:
    """The raw observation of one pipeline case: `{key}_{camera}_uint8` (absent = camera missing), `_state_raw`."""
    images = {name: inputs[f"{key}_{name}_uint8"] for name in camera_names if f"{key}_{name}_uint8" in inputs}
    return Observation(stamp_ns=stamp_ns, images=images, state=inputs[f"{key}_state_raw"], instruction=task)


def pipeline_cases(runtime, folder: Path, tolerance: float, prompt_of: Callable[[Observation], str]
                   ) -> Iterator[CaseResult]:
    """Raw record: uint8 images + raw state + task -> physical actions; prompt and token ids checked too."""
    folder = Path(folder)
    recorded = recorded_tasks(folder)
    with np.load(folder / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            observation = pipeline_observation(cases, recorded[k]["task"], f"case{k}", runtime.spec.camera_names, k)
            prompt = prompt_of(observation)
            tokens, _ = runtime.tokenizer.encode(prompt)
            result = infer(runtime, observation, cases[f"case{k}_noise"])
            error = float(np.abs(result.actions - cases[f"case{k}_actions"]).max())
            problems = []
            if prompt != recorded[k]["prompt"]:
                problems.append(f"prompt differs: {prompt!r}")
            if not np.array_equal(tokens, cases[f"case{k}_tokens"]):
                problems.append("token ids differ")
            yield CaseResult(f"case{k}", error if not problems else float("inf"), tolerance, "; ".join(problems))


@contextlib.contextmanager
def converted_bundle(checkpoint: Path, quant: str, architecture: str, convert: Callable[..., Any],
                     tolerances: Mapping[str, float] = TOLERANCES):
    """(bundle, tolerance) of `checkpoint` converted to a temporary bundle stored as `quant` (a type such
    as "q8_0", or a plan such as "lm=q8_0,expert=q4_k"); the tolerance is `tolerance_for` its stored types."""
    from embodied_ros.bundle import QuantPlan, open_bundle

    plan = QuantPlan.parse(quant)
    with tempfile.TemporaryDirectory(prefix=f"{architecture}_parity_") as scratch:
        bundle_path = Path(scratch) / "policy.gguf"
        convert(checkpoint, bundle_path, plan)
        bundle = open_bundle(bundle_path, architecture=architecture)
        yield bundle, tolerance_for({bundle.tensor_info(name).qtype.lower() for name in bundle.weight_names},
                                    tolerances)


def reference_record(folder: Path, kind: str, tolerance: float, model_inputs: tuple[str, ...]):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions. A model record
    keeps `model_inputs` per case, a pipeline record the raw state, the uint8 images and the tasks.
    A real-time chunking record is refused (its actions depend on a leftover chunk)."""
    from embodied_ros.bundle import ReferenceRecord

    folder = Path(folder)
    inputs, noise, expected, record_fields = {}, {}, {}, {"kind": kind}
    with np.load(folder / CASES_FILE) as cases:
        if any(name.endswith("_prev_chunk_left_over") for name in cases.files):
            raise ValueError(f"{folder}: a real-time chunking record cannot be a bundle's reference record "
                             "(its actions depend on a leftover chunk); use a plain record")
        for k in range(case_count(cases)):
            noise[f"case{k}"] = cases[f"case{k}_noise"]
            expected[f"case{k}"] = cases[f"case{k}_actions"]
            for name in model_inputs if kind == "model" else ("state_raw",):
                inputs[f"case{k}_{name}"] = cases[f"case{k}_{name}"]
            if kind == "pipeline":
                for name in cases.files:
                    if name.startswith(f"case{k}_") and name.endswith("_uint8"):
                        inputs[name] = cases[name]
    if kind == "pipeline":
        for k, case in enumerate(recorded_tasks(folder)):
            record_fields[f"case{k}_task"] = case["task"]
    return ReferenceRecord(inputs=inputs, expected=expected, tolerance=tolerance, noise=noise, fields=record_fields)


def verify_reference(bundle, load_runtime: Callable[[Any], Any], model_case: Callable[[Any, Any, str], np.ndarray]
                     ) -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance). `model_case(runtime,
    record, key)` gives a model record's actions; pipeline cases run the runtime's stages."""
    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: bundle has no reference record")
    runtime = load_runtime(bundle)
    worst = 0.0
    for key, expected in record.expected.items():
        if record.fields.get("kind") == "pipeline":
            observation = pipeline_observation(record.inputs, record.fields[f"{key}_task"], key,
                                               runtime.spec.camera_names)
            actions = infer(runtime, observation, record.noise[key]).actions
        else:
            actions = model_case(runtime, record, key)
        worst = max(worst, float(np.abs(actions - expected).max()))
    return worst, float(record.tolerance)



# ---- LeRobot saves: files, recorded hints, processor statistics, the written bundle ----------

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def saved_config(source: Path) -> dict[str, Any] | None:
    """The config.json of a folder that also holds model.safetensors; None for any other folder."""
    source = Path(source)
    if not (source / CONFIG_FILE).is_file() or not (source / WEIGHTS_FILE).is_file():
        return None
    try:
        config = json.loads((source / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def rename_lerobot(state_dict: Mapping[str, Any], runtime_name: Callable[[str], str | None], family: str,
                   lm_head: str) -> dict[str, np.ndarray]:
    """A LeRobot policy's `state_dict()` -> runtime names (`runtime_name` raises ValueError for a name the
    family lacks, gives None for one inference never reads). Dtypes are kept; a tied save's `lm_head`
    gives `lm.token_embd`; the patch conv is flattened to a linear."""
    unknown = []
    renamed: dict[str, np.ndarray] = {}
    for name in state_dict:
        try:
            ours = runtime_name(name)
        except ValueError:
            unknown.append(name)
            continue
        if ours is not None:
            renamed[ours] = np.asarray(state_dict[name])
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ValueError(f"checkpoint is not a LeRobot {family} policy: unexpected tensors {shown}")
    if "lm.token_embd" not in renamed and lm_head in state_dict:
        renamed["lm.token_embd"] = np.asarray(state_dict[lm_head])
    patch = renamed.get("vision.patch.weight")
    if patch is not None and patch.ndim == 4:
        renamed["vision.patch.weight"] = patch.reshape(patch.shape[0], -1)
    return renamed


def check_weight_shapes(weights: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], family: str,
                        exact: bool = False) -> None:
    """Every expected tensor present with its shape (ndarray or quantized tensor), and with `exact` no other;
    else a ValueError."""
    missing = [name for name in expected if name not in weights]
    if missing:
        raise ValueError(f"{family} weights lack {len(missing)} tensors, e.g. {', '.join(missing[:4])}")
    wrong = [f"{name} {tuple(weights[name].shape)} (expected {shape})"
             for name, shape in expected.items() if tuple(weights[name].shape) != shape]
    if wrong:
        raise ValueError(f"{family} weights do not match the config: {'; '.join(wrong[:4])}")
    extra = sorted(set(weights) - set(expected)) if exact else []
    if extra:
        raise ValueError(f"{family} weights hold tensors the config does not describe: {', '.join(extra[:4])}")


def check_overrides(overrides: Mapping[str, Any] | None, known: frozenset[str], family: str) -> dict[str, Any]:
    """The conversion settings (`--set KEY=VALUE`, --tokenizer FILE) as a dict; an unknown one is refused."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown {family} conversion setting(s) {unknown}; known: {sorted(known)}")
    return overrides


def tokenizer_bytes(source: Path, overrides: Mapping[str, Any], default_file: str, what: str) -> bytes | None:
    """The tokenizer the `tokenizer` setting names (it must exist), else `default_file` beside the checkpoint."""
    path = Path(overrides.get("tokenizer") or Path(source) / default_file)
    if overrides.get("tokenizer") and not path.is_file():
        raise ValueError(f"{what} {path} does not exist")
    return path.read_bytes() if path.is_file() else None


def recorded_case_notes(source: Path, reference: Path | None) -> dict[str, Any] | None:
    """The cases.json of the reference folder, else beside the checkpoint or one folder up; None if none."""
    for folder in ([Path(reference)] if reference else []) + [Path(source), Path(source).parent]:
        path = folder / PIPELINE_CASES
        if path.is_file():
            return json.loads(path.read_text())
    return None


def processor_step(source: Path, pipeline_file: str, step_name: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(config, state tensors) of the named step of a LeRobot processor pipeline file; empty when absent."""
    from safetensors.numpy import load_file

    path = Path(source) / pipeline_file
    if not path.is_file():
        return {}, {}
    for step in json.loads(path.read_text()).get("steps", []):
        if step.get("registry_name") == step_name:
            state_file = step.get("state_file")
            tensors = load_file(str(Path(source) / state_file)) if state_file else {}
            return step.get("config", {}), tensors
    return {}, {}


# LeRobot's normalization modes -> the statistics each reads (sequence/normalize.py picks the mode
# back from which of them a bundle stores)
NORMALIZATION_STATS = {"QUANTILES": ("q01", "q99"), "MEAN_STD": ("mean", "std"), "MIN_MAX": ("min", "max")}


def mode_stats(tensors: Mapping[str, np.ndarray], feature: str, mode: str, what: str,
               supported: tuple[str, ...] = tuple(NORMALIZATION_STATS)) -> dict[str, np.ndarray]:
    if mode == "IDENTITY":
        return {}
    if mode not in supported:
        raise ValueError(f"{what} normalization {mode!r} is not supported "
                         f"(supported: IDENTITY, {', '.join(supported)})")
    try:
        return {stat: np.asarray(tensors[f"{feature}.{stat}"], np.float32).reshape(-1)
                for stat in NORMALIZATION_STATS[mode]}
    except KeyError as error:
        raise ValueError(f"normalizer stats lack {error} for the {what}") from None


def lerobot_stats(source: Path, raw: Mapping[str, Any], default_mode: str,
                  supported: tuple[str, ...] = tuple(NORMALIZATION_STATS)) -> dict[str, dict[str, np.ndarray]]:
    """The state and action statistics of a LeRobot save's pre- and postprocessor (absent ones left out)."""
    modes = raw.get("normalization_mapping", {})
    stats = {}
    _, pre = processor_step(source, "policy_preprocessor.json", "normalizer_processor")
    _, post = processor_step(source, "policy_postprocessor.json", "unnormalizer_processor")
    state = mode_stats(pre, "observation.state", modes.get("STATE", default_mode), "state", supported) if pre else {}
    action = mode_stats(post, "action", modes.get("ACTION", default_mode), "action", supported) if post else {}
    if state:
        stats["state"] = state
    if action:
        stats["action"] = action
    return stats


def write_policy_bundle(architecture: str, checkpoint, quant_plan, group_of: Callable[[str], str], output: Path,
                        reference: Path | None, progress: bool, parity, tokenizer_kind: str = "sentencepiece") -> None:
    """A read LeRobot checkpoint (config, weights, stats, tokenizer, source) as a bundle stored by
    `quant_plan` (a QuantPlan or its text), checked against `reference` as `write_checked` does."""
    from embodied_ros.bundle import BundleWriter, QuantPlan, RobotMetadata

    plan = quant_plan if isinstance(quant_plan, QuantPlan) else QuantPlan.parse(quant_plan)
    writer = BundleWriter(architecture, plan, group_of=group_of)
    model, solver, robot = checkpoint.config.bundle_sections()
    writer.set_config(model)
    writer.set_solver(solver)
    writer.set_robot(RobotMetadata(**robot))
    writer.set_source(checkpoint.source)
    writer.add_weights(checkpoint.weights)
    if checkpoint.stats:
        writer.set_stats(checkpoint.stats)
    if checkpoint.tokenizer is not None:
        writer.set_tokenizer(checkpoint.tokenizer, kind=tokenizer_kind)
    write_checked(writer, Path(output), reference, progress, parity)


def write_checked(writer, output: Path, reference: Path | None, progress: bool, parity) -> None:
    """Write the bundle; with `reference` (a record folder) its cases become the bundle's reference record,
    with the tolerance of the weakest stored type, and a bundle that then misses them is removed."""
    from embodied_ros.bundle import open_bundle

    if reference is not None:
        stored_types = {qtype for _, _, qtype, _ in writer.plan_report()}
        writer.set_reference(parity.reference_record(Path(reference), parity.tolerance_for(stored_types)))
    writer.write(output, progress=progress)
    if reference is None:
        return
    error, tolerance = parity.verify_reference(open_bundle(output, architecture=writer.architecture))
    if not error <= tolerance:
        Path(output).unlink(missing_ok=True)
        raise ValueError(f"converted bundle misses its reference record: max abs action error {error:.3g} > "
                         f"tolerance {tolerance:.3g}; bundle not written")
