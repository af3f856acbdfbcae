"""A LeRobot policy save: its files, the renaming of its state dict, the checks of what was read,
conversion settings and recorded hints, its processors' normalization statistics, and the bundle
written from it (checked against a reference record when one is given)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from embodied_ros.bundle.source import LAZY
from embodied_ros.models.kit.records import PIPELINE_CASES

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


Rules = list[tuple[re.Pattern, str | None]]  # (pattern of a checkpoint name, runtime name or None), in order


def runtime_name(name: str, rules: Rules, family: str) -> str | None:
    """The runtime name the first matching rule gives a checkpoint tensor of `family`; None for tensors
    inference never reads. Raises ValueError for a name no rule knows (e.g. a checkpoint of another policy)."""
    for pattern, replacement in rules:
        if pattern.match(name):
            return None if replacement is None else pattern.sub(replacement, name)
    raise ValueError(f"{name!r} is not a {family} parameter")


def rename_lerobot(state_dict: Mapping[str, Any], runtime_name: Callable[[str], str | None], family: str,
                   lm_head: str) -> dict[str, np.ndarray]:
    """A LeRobot policy's `state_dict()` -> runtime names (`runtime_name` raises ValueError for a name the
    family lacks, gives None for one inference never reads). Dtypes are kept; a tied save's `lm_head`
    gives `lm.token_embd`; the patch conv is flattened to a linear. BF16 tensors stay unread (`Widened`)."""
    unknown = []
    renamed: dict[str, np.ndarray] = {}
    for name in state_dict:
        try:
            ours = runtime_name(name)
        except ValueError:
            unknown.append(name)
            continue
        if ours is not None:
            tensor = state_dict[name]
            renamed[ours] = tensor if isinstance(tensor, LAZY) else np.asarray(tensor)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ValueError(f"checkpoint is not a {family} policy: unexpected tensors {shown}")
    if "lm.token_embd" not in renamed and lm_head in state_dict:
        tensor = state_dict[lm_head]
        renamed["lm.token_embd"] = tensor if isinstance(tensor, LAZY) else np.asarray(tensor)
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


def record_config(config, overrides: Mapping[str, Any], source: Path):
    """A reference record's model config with the robot settings of `--set` (action_period_s,
    state_names); its dimensions are its own, so a setting of those is refused."""
    fixed = sorted(set(overrides) - {"state_names", "action_period_s", "tokenizer"})
    if fixed:
        raise ValueError(f"{source}: a reference record states its dimensions in config.json; --set "
                         f"{', '.join(fixed)} applies to LeRobot saves only")
    changes: dict[str, Any] = {}
    if "action_period_s" in overrides:
        changes["action_period_s"] = float(overrides["action_period_s"])
    if "state_names" in overrides:
        names = tuple(overrides["state_names"])
        if len(names) != len(config.state_names):
            raise ValueError(f"{source}: --set state_names has {len(names)} names, the model reads "
                             f"{len(config.state_names)} state values")
        changes["state_names"] = names
    return dataclasses.replace(config, **changes)


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
                        reference: Path | None, progress: bool, records, tokenizer_kind: str = "sentencepiece") -> None:
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
    write_checked(writer, Path(output), reference, progress, records)


def write_checked(writer, output: Path, reference: Path | None, progress: bool, records) -> None:
    """Write the bundle; with `reference` (a record folder) its cases become the bundle's reference record,
    with the tolerance of the weakest stored type, and a bundle that then misses them is removed.
    `records`: the family's recorded cases (reference_record, tolerance_for, verify_reference)."""
    from embodied_ros.bundle import open_bundle

    if reference is not None:
        stored_types = {qtype for _, _, qtype, _ in writer.plan_report()}
        writer.set_reference(records.reference_record(Path(reference), records.tolerance_for(stored_types)))
    writer.write(output, progress=progress)
    if reference is None:
        return
    error, tolerance = records.verify_reference(open_bundle(output, architecture=writer.architecture))
    if not error <= tolerance:
        Path(output).unlink(missing_ok=True)
        raise ValueError(f"converted bundle misses its reference record: max abs action error {error:.3g} > "
                         f"tolerance {tolerance:.3g}; bundle not written")
