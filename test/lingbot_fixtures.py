"""Loading lerobot's LingBot-VA record (test/data/lingbot_va_tiny) for the test_lingbot_va_* tests."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from embodied_ros.kernels import KernelSet
from embodied_ros.heads import dual_stream as ds
from embodied_ros.models.lingbot_va import policy as pl

TINY = Path(__file__).resolve().parent / "data" / "lingbot_va_tiny"
CHECKPOINT = TINY / "checkpoint"
EXTRA = sorted(p for p in (TINY.parent / "extra").glob("lingbot_va_*") if (p / "cases.npz").is_file())


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


@lru_cache(maxsize=None)
def frozen_modules(folder: Path = TINY):
    """(tokenizer, UMT5 config and weights, VAE encoder) of the checkpoint's frozen sub-folders."""
    from embodied_ros.backbone import umt5, wan_vae
    from embodied_ros.models.lingbot_va.prompt import T5Tokenizer

    checkpoint = folder / "checkpoint"
    _, _, config = record(folder)
    tokenizer = T5Tokenizer(checkpoint / "tokenizer" / "spiece.model", config["max_sequence_length"])
    text_cfg = umt5.UMT5Config.from_transformers(json.loads((checkpoint / "text_encoder" / "config.json").read_text()))
    text = umt5.load_weights(load_file(checkpoint / "text_encoder" / "model.safetensors").__getitem__, text_cfg)
    vae_cfg = wan_vae.WanVAEConfig.from_diffusers(json.loads((checkpoint / "vae" / "config.json").read_text()))
    vae = wan_vae.WanVAEEncoder(vae_cfg, load_file(checkpoint / "vae" / "diffusion_pytorch_model.safetensors"))
    return tokenizer, text_cfg, text, vae


def camera_images(case: int, step: int, folder: Path = TINY) -> dict:
    _, z, config = record(folder)
    return {name: z[f"case{case}_images_{name.rsplit('.', 1)[1]}"][step] for name in config["obs_cam_keys"]}
