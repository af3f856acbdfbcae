"""Loading lerobot's LingBot-VA record (test/data/lingbot_va_tiny) for the test_lingbot_va_* tests."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from embodied_ros.kernels import KernelSet
from embodied_ros.models.lingbot_va import dual_stream as ds
from embodied_ros.models.lingbot_va import policy as pl

TINY = Path(__file__).resolve().parent / "data" / "lingbot_va_tiny"
CHECKPOINT = TINY / "checkpoint"


@lru_cache(maxsize=None)
def record(folder: Path = TINY) -> tuple[dict, dict, dict]:
    """(cases.json, cases.npz arrays, the checkpoint's config.json)."""
    with np.load(folder / "cases.npz") as arrays:
        values = {name: arrays[name] for name in arrays.files}
    return (json.loads((folder / "cases.json").read_text()), values,
            json.loads((folder / "checkpoint" / "config.json").read_text()))


@lru_cache(maxsize=None)
def transformer(folder: Path = TINY) -> tuple[ds.DualStreamConfig, ds.DualStreamWeights]:
    _, _, config = record(folder)
    state = load_file(folder / "checkpoint" / "model.safetensors")
    cfg = ds.DualStreamConfig.from_lerobot(config)
    return cfg, ds.load_weights(lambda name: state[f"transformer.{name}"], cfg)


def episode(case: int, folder: Path = TINY, backend: str = "numpy") -> pl.Episode:
    """An episode of case `case` on the recorded prompt embeddings."""
    meta, z, config = record(folder)
    spec = meta["cases"][case]
    chunk = pl.ChunkConfig.from_lerobot(config, guidance_scale=spec["guidance_scale"],
                                        action_guidance_scale=spec["action_guidance_scale"])
    rows = [z[f"case{case}_prompt_embeds"]]
    if chunk.cfg_rows == 2:
        rows.append(z[f"case{case}_negative_prompt_embeds"])
    cfg, weights = transformer(folder)
    return pl.Episode(KernelSet(backend), cfg, chunk, weights, rows, z[f"case{case}_init_latent"].shape[2:])
