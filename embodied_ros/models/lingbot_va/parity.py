"""Parity of the Wan block against recorded PyTorch runs (diffusers `WanTransformerBlock`).

A record folder (block.safetensors, config.json, cases.npz) is converted into a blocks-only bundle
with the requested weight type, read back, and each recorded case is run: tokens, context and temb
in, block output compared with the recorded one (max abs error). Running through the bundle checks
the converter, the quantizer and the reader along with the block.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embodied_ros.backbone.wan_block import Rope, WanBlockConfig, context_kv, load_block_weights, wan_block
from embodied_ros.bundle import Bundle, QuantPlan, open_bundle
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.rope3d import rope3d_tables
from embodied_ros.models.lingbot_va.config import ARCHITECTURE
from embodied_ros.models.lingbot_va.convert import BLOCK_CASES, BLOCKS_ONLY, convert_block_record, is_block_record


@dataclass(frozen=True)
class CaseResult:
    name: str  # e.g. "case0"
    max_abs_error: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_abs_error <= self.tolerance


def recognizes_fixture(path: str | Path) -> bool:
    """True for a Wan block record folder with recorded cases."""
    path = Path(path)
    return is_block_record(path) and (path / BLOCK_CASES).is_file()


def bundle_blocks(bundle: Bundle) -> tuple[WanBlockConfig, list]:
    """The block config and weights of a blocks-only bundle."""
    section = bundle.config.get(BLOCKS_ONLY)
    if section is None:
        raise ValueError(f"{bundle.path}: not a blocks-only {ARCHITECTURE} bundle")
    cfg = WanBlockConfig(section["dim"], section["num_heads"], section["ffn_dim"], section["eps"],
                         section["rope_theta"])
    return cfg, [load_block_weights(bundle.weight, f"blk.{i}.", cfg) for i in range(section["num_layers"])]


def run_block_reference(bundle: Bundle, backend: str = "numba") -> list[CaseResult]:
    """Run a blocks-only bundle's reference record (block 0) case by case."""
    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: the bundle carries no reference record")
    cfg, blocks = bundle_blocks(bundle)
    ks = KernelSet(backend)
    rope = Rope(*rope3d_tables(tuple(int(n) for n in record.inputs["grid_fhw"]), cfg.head_dim, cfg.rope_theta))
    results = []
    for name in sorted(record.expected):
        case = name.removesuffix("_output")
        x, context, temb = (np.asarray(record.inputs[f"{case}_{k}"], np.float32)
                            for k in ("hidden_states", "encoder_hidden_states", "temb"))
        out, _ = wan_block(ks, cfg, blocks[0], x, temb, rope, context_kv(ks, cfg, blocks[0].cross_attn, context))
        error = float(np.max(np.abs(out - record.expected[name])))
        results.append(CaseResult(case, error, record.tolerance))
    return results


def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert a block record with weight type `quant` (a plan such as "q4_k" or "ffn=q4_k") and run its cases."""
    with tempfile.TemporaryDirectory(prefix="wan_parity_") as folder:
        bundle_path = convert_block_record(Path(path), Path(folder) / "block.gguf", QuantPlan.parse(quant))
        return run_block_reference(open_bundle(bundle_path, architecture=ARCHITECTURE), backend)
