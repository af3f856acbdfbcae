"""Checkpoints -> lingbot_va bundles (the family's side of `embodied-ros bundle convert`).

Two sources are accepted:
- lerobot's LingBot-VA checkpoint with its frozen modules (lerobot_bundle.py);
- a Wan block record folder (`block.safetensors` = one `WanTransformerBlock.state_dict()` with
  diffusers names, plus `config.json`, optionally `cases.npz`), e.g. the reference records: a
  bundle holding that block alone ("blocks only"), whose reference record is the recorded cases.

A block's weights are renamed (naming.py) and stored per the quantization plan; the plan's groups
are naming.weight_group's (modulation, self_attn, cross_attn, ffn). 1-D tensors (biases, norm
weights) always stay float32, and so do the modulation tables unless the plan names their group:
they are added to the time embedding, are tiny, and every token's shift/scale/gate comes from them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from embodied_ros.bundle.source import map_safetensors

from embodied_ros.bundle import BundleWriter, QuantPlan, ReferenceRecord
from embodied_ros.models.lingbot_va import lerobot_bundle, naming
from embodied_ros.models.lingbot_va.config import ARCHITECTURE

BLOCK_FILE, BLOCK_CONFIG, BLOCK_CASES = "block.safetensors", "config.json", "cases.npz"
BLOCKS_ONLY = "blocks_only"  # config section of a bundle that holds bare Wan blocks
# largest acceptable max-abs error of a block output against the float32 reference, per weight type
# (outputs are O(1-5); measured on wan_block_tiny: bf16 0.013, q8_0 0.029)
BLOCK_TOLERANCE = {"f32": 1e-4, "f16": 5e-3, "bf16": 5e-2, "q8_0": 5e-2, "q4_k": 3e-1}


def is_block_record(source: Path) -> bool:
    return source.is_dir() and (source / BLOCK_FILE).is_file() and (source / BLOCK_CONFIG).is_file()


def detect(source: Path) -> bool:
    source = Path(source)
    return is_block_record(source) or lerobot_bundle.is_checkpoint(source)


def convert(source: Path, output: Path, quant_plan: QuantPlan, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    source = Path(source)
    if overrides and not lerobot_bundle.is_checkpoint(source):
        raise ValueError("--set settings apply to lerobot lingbot_va checkpoints only")
    if lerobot_bundle.is_checkpoint(source):
        if reference is not None:
            raise ValueError("a lerobot lingbot_va checkpoint's bundle records its own reference; omit --reference")
        lerobot_bundle.convert_checkpoint(source, output, quant_plan, progress, settings=overrides)
    elif is_block_record(source):
        convert_block_record(source, output, quant_plan, reference or source, progress)
    else:
        raise ValueError(f"{source}: neither lerobot's lingbot_va checkpoint (config.json of type "
                         f"{lerobot_bundle.POLICY_TYPE!r} + model.safetensors) nor a Wan block record "
                         f"({BLOCK_FILE} + {BLOCK_CONFIG})")


def family_plan(plan: QuantPlan | str | None) -> QuantPlan:
    """The plan as given, with the modulation tables kept float32 unless it names them."""
    plan = plan if isinstance(plan, QuantPlan) else QuantPlan.parse(plan)
    return plan if "modulation" in plan.types else QuantPlan({**plan.types, "modulation": "f32"})


def block_config(values: dict) -> dict:
    """The blocks-only config section from a block record's config.json."""
    return {"dim": int(values["dim"]), "num_heads": int(values["num_heads"]), "ffn_dim": int(values["ffn_dim"]),
            "eps": float(values.get("eps", 1e-6)), "rope_theta": float(values.get("rotary", {}).get("theta", 1e4)),
            "num_layers": 1}


def block_reference(cases_file: Path, grid_fhw: list[int], tolerance: float) -> ReferenceRecord:
    """The recorded cases of a block record: inputs (tokens, context, temb, grid) -> outputs."""
    cases = np.load(cases_file)
    inputs, expected = {"grid_fhw": np.asarray(grid_fhw, np.int64)}, {}
    for case in sorted({name.split("_", 1)[0] for name in cases.files}):
        for name in ("hidden_states", "encoder_hidden_states", "temb"):
            inputs[f"{case}_{name}"] = cases[f"{case}_{name}"][0]
        expected[f"{case}_output"] = cases[f"{case}_output"][0]
    return ReferenceRecord(inputs=inputs, expected=expected, tolerance=tolerance,
                           fields={"kind": "wan_block", "source": str(cases_file)})


def convert_block_record(source: Path, output: Path, quant_plan: QuantPlan | str | None = None,
                         reference: Path | None = None, progress: bool = False) -> Path:
    """One Wan block saved on its own -> a blocks-only bundle (block 0), with its cases as reference."""
    values = json.loads((source / BLOCK_CONFIG).read_text())
    section = block_config(values)
    weights = naming.convert_block_tensors(map_safetensors(source / BLOCK_FILE))
    writer = BundleWriter(ARCHITECTURE, family_plan(quant_plan), group_of=naming.weight_group)
    writer.set_config({BLOCKS_ONLY: section})
    writer.add_weights(weights)
    writer.set_source(str(source / BLOCK_FILE))
    cases = Path(reference or source) / BLOCK_CASES
    if cases.is_file():
        stored = {qtype for _, _, qtype, _ in writer.plan_report()}
        tolerance = max(BLOCK_TOLERANCE[qtype] for qtype in stored)
        writer.set_reference(block_reference(cases, values["grid_fhw"], tolerance))
    return writer.write(output, progress=progress)
