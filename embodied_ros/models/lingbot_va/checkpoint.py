"""A diffusers-style LingBot-VA checkpoint folder: its layout, a reader, and a random-weight generator.

No trained checkpoint can be downloaded here, so tests, the demo and the benchmarks run on random
weights written in the same layout a converted release would have:

    <folder>/config.json                          {"_class_name": CLASS_NAME, **LingbotVAConfig fields}
    <folder>/diffusion_pytorch_model.safetensors  float32 tensors, diffusers / Wan names (naming.py)
    <folder>/tokenizer.model                      SentencePiece model of the instruction tokenizer

    python -m embodied_ros.models.lingbot_va.checkpoint OUT_DIR --preset small [--layers N] [--seed S]

The generator is deterministic: the same preset, layers and seed give byte-identical files.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from embodied_ros.models.lingbot_va import naming, text
from embodied_ros.models.lingbot_va.config import PRESETS, LingbotVAConfig
from embodied_ros.models.lingbot_va.transformer import tensor_shapes

CLASS_NAME = "LingbotVAWorldActionModel"
CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "diffusion_pytorch_model.safetensors", "tokenizer.model"


def checkpoint_shapes(cfg: LingbotVAConfig) -> dict[str, tuple[int, ...]]:
    """Every checkpoint tensor (diffusers name) -> its shape in the checkpoint's layout."""
    bundle_shapes = tensor_shapes(cfg)
    sources = {f"blocks.{i}.{suffix}" for i in range(cfg.num_layers) for suffix in naming.BLOCK_NAMES}
    shapes = {}
    for source in sorted(sources | set(naming.TOP_NAMES)):
        shape = bundle_shapes[naming.bundle_name(source)]
        if source.endswith("scale_shift_table"):
            shape = (1, *shape)
        elif source == "patch_embedding.weight":
            shape = (cfg.dim, cfg.latent_channels, 1, cfg.latent_patch, cfg.latent_patch)
        shapes[source] = shape
    for source, (quantity, _) in naming.STATS_NAMES.items():
        shapes[source] = (cfg.state_dim if quantity == "state" else cfg.action_dim,)
    return shapes


def _random_tensor(rng: np.random.Generator, name: str, shape: tuple[int, ...], dim: int) -> np.ndarray:
    if name.endswith("_std"):
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if name.endswith("_mean"):
        return (0.2 * rng.standard_normal(shape)).astype(np.float32)
    if name.endswith("scale_shift_table"):
        return (rng.standard_normal(shape) * dim ** -0.5).astype(np.float32)
    if "norm" in name and name.endswith(".weight"):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if name == "text_token_embedding.weight":
        return rng.standard_normal(shape).astype(np.float32)
    if len(shape) >= 2:
        return (rng.standard_normal(shape) * float(np.prod(shape[1:])) ** -0.5).astype(np.float32)
    return (0.02 * rng.standard_normal(shape)).astype(np.float32)


def write_random_checkpoint(folder: str | Path, cfg: LingbotVAConfig, seed: int = 0) -> Path:
    """Write a checkpoint of `cfg` with random weights; the tokenizer is trained to `cfg.vocab_size` pieces."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = text.train_tokenizer(text.instruction_corpus(), cfg.vocab_size)
    rng = np.random.default_rng(seed)
    tensors = {name: _random_tensor(rng, name, shape, cfg.dim) for name, shape in checkpoint_shapes(cfg).items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    (folder / TOKENIZER_FILE).write_bytes(tokenizer)
    (folder / CONFIG_FILE).write_text(json.dumps({"_class_name": CLASS_NAME, **cfg.to_dict()}, indent=1) + "\n")
    return folder


def is_checkpoint(folder: Path) -> bool:
    config = folder / CONFIG_FILE
    if not (folder.is_dir() and config.is_file() and (folder / WEIGHTS_FILE).is_file()):
        return False
    try:
        return json.loads(config.read_text()).get("_class_name") == CLASS_NAME
    except (ValueError, OSError):
        return False


def read_checkpoint(folder: str | Path) -> tuple[LingbotVAConfig, dict[str, np.ndarray], bytes]:
    """(config, tensors by diffusers name, tokenizer bytes); ValueError naming what is missing or wrong."""
    folder = Path(folder)
    for name in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE):
        if not (folder / name).is_file():
            raise ValueError(f"{folder}: not a lingbot_va checkpoint, {name} is missing")
    values = json.loads((folder / CONFIG_FILE).read_text())
    if values.pop("_class_name", None) != CLASS_NAME:
        raise ValueError(f"{folder / CONFIG_FILE}: _class_name is not {CLASS_NAME!r}")
    cfg = LingbotVAConfig.from_dict(values)
    tensors = load_file(str(folder / WEIGHTS_FILE))
    expected = checkpoint_shapes(cfg)
    missing, unknown = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    wrong = {n: (tuple(tensors[n].shape), expected[n]) for n in set(expected) & set(tensors)
             if tuple(tensors[n].shape) != expected[n]}
    if missing or unknown or wrong:
        raise ValueError(f"{folder / WEIGHTS_FILE} does not match its config: missing {missing[:5]}"
                         f"{'...' if len(missing) > 5 else ''}, unknown {unknown[:5]}, shape (got, expected) {wrong}")
    return cfg, tensors, (folder / TOKENIZER_FILE).read_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a random-weight LingBot-VA checkpoint (diffusers layout).")
    parser.add_argument("output", type=Path, help="folder to write")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--layers", type=int, help="number of transformer blocks (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]
    if args.layers is not None:
        cfg = dataclasses.replace(cfg, num_layers=args.layers)
    write_random_checkpoint(args.output, cfg, args.seed)
    print(f"wrote {args.output} ({args.preset}, {cfg.num_layers} blocks, seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
