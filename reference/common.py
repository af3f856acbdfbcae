"""Helpers shared by the reference generators in this folder.

Every generator is run as `python gen_<kind>.py [SPEC.json] OUT_DIR` in the PyTorch reference
environment (`install.sh`). A spec is a small JSON object that states only what differs from the
generator's built-in defaults (`DEFAULTS` at the top of each script); it is merged into the defaults
key by key (nested objects merge, lists and plain values replace). All paths come from the command
line or from environment variables; nothing here knows where the repository lives.

The three things every generator does the same way live here: seeding (one `torch.Generator` per
purpose, never the global RNG unless LeRobot itself draws from it), redrawing a module's parameters
from a seeded generator in `named_parameters()` order, and writing a record (safetensors weights,
`config.json`, `cases.npz`, files readable by everyone).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import struct
import sys
from pathlib import Path
from typing import Callable, Iterable, Mapping

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever fetched from the Hugging Face hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------- specs
def merged(defaults: Mapping, changes: Mapping, whole: Iterable[str] = ()) -> dict:
    """`defaults` with `changes` applied: nested dicts are merged, anything else is replaced; the
    top-level keys named in `whole` (mappings that are data, such as a camera table) are replaced."""
    out = copy.deepcopy(dict(defaults))
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and key not in whole:
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def command_line(defaults: Mapping, description: str, argv: list[str] | None = None,
                 extra: Callable[[argparse.ArgumentParser], None] | None = None, whole: Iterable[str] = ()):
    """Parses `[SPEC.json] OUT_DIR` and returns (spec, out_dir, args). Without a spec the defaults are
    used as they are; `--print-spec` shows the merged spec and exits. `whole`: as for `merged`."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", metavar="[SPEC.json] OUT_DIR",
                        help="spec (changes to the defaults; optional) and the folder to write")
    parser.add_argument("--print-spec", action="store_true", help="print the merged spec and exit")
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if len(args.paths) > 2:
        parser.error("expected [SPEC.json] OUT_DIR")
    changes = json.loads(Path(args.paths[0]).read_text()) if len(args.paths) == 2 else {}
    spec = merged(defaults, changes, whole)
    if args.print_spec:
        print(json.dumps(spec, indent=1))
        sys.exit(0)
    return spec, Path(args.paths[-1]).resolve(), args


def threads(n: int | None) -> None:
    """Pins torch's intra-op threads (the records state how many made them)."""
    if n:
        torch.set_num_threads(int(n))


# ---------------------------------------------------------------------------------------- seeding
def rng(seed: int) -> torch.Generator:
    """A private torch generator: every draw of a record comes from one of these."""
    return torch.Generator().manual_seed(int(seed))


def seed_global(seed: int) -> None:
    """Seeds the global torch RNG (module construction draws from it; the draws are overwritten)."""
    torch.manual_seed(int(seed))


# ---------------------------------------------------------------------------------------- weights
def norm_weight_names(module: torch.nn.Module) -> set[str]:
    """Names of the affine weights of every LayerNorm and *RMSNorm in `module`."""
    names = set()
    for prefix, sub in module.named_modules():
        is_layer_norm = isinstance(sub, torch.nn.LayerNorm) and sub.elementwise_affine
        if is_layer_norm or type(sub).__name__.endswith("RMSNorm"):
            names.add(f"{prefix}.weight" if prefix else "weight")
    return names


def redraw(module: torch.nn.Module, seed: int, rule: Callable[[str, torch.Tensor, torch.Tensor], torch.Tensor]
           ) -> None:
    """Overwrites every parameter with `rule(name, parameter, standard normal draw)`, drawing from one
    generator seeded with `seed` in `named_parameters()` order (a tied parameter is drawn once)."""
    generator = rng(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            draw = torch.randn(parameter.shape, generator=generator)
            parameter.copy_(rule(name, parameter, draw))


def last_dim_rule(name: str, p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """pi0 / pi0.5: matrices randn * p.shape[-1]**-0.5, vectors 0.1 * randn."""
    return r * p.shape[-1] ** -0.5 if p.ndim > 1 else 0.1 * r


def fan_in_rule(norms: set[str]) -> Callable:
    """SmolVLA / GR00T: tensors with ndim > 1 randn * (elements per output row)**-0.5, norm weights
    1 + 0.1 * randn, other vectors 0.1 * randn; GR00T's category-specific `.W` (categories, in, out)
    randn * in**-0.5 and its `.b` like a vector."""
    def rule(name: str, p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        if name.endswith(".W"):
            return r * p.shape[1] ** -0.5
        if p.ndim == 1 or name.endswith(".b"):
            return 1.0 + 0.1 * r if name in norms else 0.1 * r
        return r * p[0].numel() ** -0.5
    return rule


def wan_rule(name: str, p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Wan blocks (and LingBot-VA's transformer): modulation tables 0.3 * randn, q/k RMS norms and
    norm2 1 + 0.2 * randn, other vectors 0.1 * randn, matrices randn * in_features**-0.5."""
    if name.endswith("scale_shift_table"):
        return 0.3 * r
    if name.endswith(("norm_q.weight", "norm_k.weight", "norm2.weight")):
        return 1.0 + 0.2 * r
    return 0.1 * r if p.ndim == 1 else r * p.shape[-1] ** -0.5


def state_dict_of(module: torch.nn.Module, drop: Iterable[str] = (), copy: bool = True) -> dict[str, torch.Tensor]:
    """The module's tensors, copied; without `copy` the module's own (a full-size model cannot hold two
    copies: check them with `fingerprint` before they are written)."""
    dropped = set(drop)
    return {k: (v.detach().clone() if copy else v.detach()).contiguous() for k, v in module.state_dict().items()
            if k not in dropped}


def fingerprint(tensors: Mapping[str, torch.Tensor]) -> list[float]:
    """A float64 sum per tensor (in 4M-element pieces, no full-size copy): equal before and after the
    runs when nothing changed the weights in place."""
    return [sum(float(piece.double().sum()) for piece in t.detach().reshape(-1).split(1 << 22))
            for _, t in sorted(tensors.items())]


def count(tensors: Mapping[str, torch.Tensor]) -> int:
    return int(sum(t.numel() for t in tensors.values()))


# ---------------------------------------------------------------------------------------- taps
def keep(x):
    """A detached copy of a tensor (or of every tensor in a tuple / list)."""
    if isinstance(x, (tuple, list)):
        return type(x)(keep(v) for v in x)
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def first_only(store: dict, key: str, value_of: Callable) -> Callable:
    """A hook body that stores `value_of(*hook args)` under `key` the first time it runs."""
    def hook(*args):
        if key not in store:
            store[key] = value_of(*args)
    return hook


# ---------------------------------------------------------------------------------------- output
def versions(*packages: str) -> dict:
    """Versions of the named packages (import names) plus Python's, for `generated_by`."""
    out = {}
    for name in packages:
        module = __import__(name)
        out[name] = getattr(module, "__version__", "unknown")
    out["python"] = platform.python_version()
    return out


def generated_by(script: str, *packages: str, **more) -> dict:
    info = versions(*packages)
    info["script"] = script
    info.update(more)
    return info


def write_json(path: Path, data) -> None:
    Path(path).write_text(json.dumps(data, indent=1))


_SAFETENSORS_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                       torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                       torch.uint8: "U8", torch.bool: "BOOL"}


def save_safetensors(tensors: Mapping[str, torch.Tensor], path: Path, dtype: torch.dtype | None = None) -> None:
    """The safetensors format, written one tensor at a time, each cast to `dtype` (if given) only as it is
    written. safetensors' own save_file turns every tensor into bytes first, and a cast copy of every
    tensor first, either doubles the peak of a full-size model (pi0.5: 14 GB of weights)."""
    items = sorted(tensors.items())
    header, offset = {}, 0
    for name, tensor in items:
        stored = dtype or tensor.dtype
        size = tensor.numel() * torch.empty((), dtype=stored).element_size()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[stored], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)))
        file.write(encoded)
        for _, tensor in items:
            data = tensor.detach().to(dtype or tensor.dtype).contiguous().reshape(-1)
            file.write(memoryview(data.view(torch.uint8).numpy()))


def write_record(out: Path, *, weights: Mapping[str, torch.Tensor] | None = None,
                 weights_dtype: torch.dtype | None = None, weights_file: str = "model.safetensors",
                 config: Mapping | None = None,
                 config_file: str = "config.json", arrays: Mapping[str, np.ndarray] | None = None,
                 compressed: bool = False) -> None:
    """Writes what is given of: the weights (safetensors, each cast to `weights_dtype` as it is written), the
    config (JSON), the cases (npz)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if weights is not None:
        save_safetensors(weights, out / weights_file, weights_dtype)
    if arrays is not None:
        assert all(np.asarray(a).dtype != np.float64 for a in arrays.values()), "float64 array in a record"
        (np.savez_compressed if compressed else np.savez)(out / "cases.npz", **arrays)
    if config is not None:
        write_json(out / config_file, config)
    readable(out)


def readable(folder: Path) -> None:
    """safetensors writes 0600 files; records are shared, so make everything under `folder` 0644."""
    for root, _, files in os.walk(folder):
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


# ---------------------------------------------------------------------------------------- LeRobot bits
def lerobot_engine_fit_rows() -> Callable:
    """LeRobot's `_normalize_prev_actions_length` (rollout/inference/rtc.py: pads or cuts a leftover
    to the execution horizon, as its real-time chunking engine does). Importing that module pulls in
    the `datasets` package, so the one function is compiled from the installed source file."""
    import ast

    import lerobot

    path = Path(lerobot.__file__).parent / "rollout" / "inference" / "rtc.py"
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_normalize_prev_actions_length")
    namespace: dict = {"torch": torch}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["_normalize_prev_actions_length"]


def policy_features(cameras: Mapping[str, tuple], state_dim: int | None, action_dim: int) -> dict:
    """`input_features` / `output_features` of a LeRobot policy config: VISUAL (3, H, W) per camera
    (in the given order), then the state when there is one, and the action."""
    from lerobot.configs import FeatureType, PolicyFeature

    inputs = {name: PolicyFeature(FeatureType.VISUAL, (3, *hw)) for name, hw in cameras.items()}
    if state_dim is not None:
        inputs["observation.state"] = PolicyFeature(FeatureType.STATE, (state_dim,))
    return {"input_features": inputs,
            "output_features": {"action": PolicyFeature(FeatureType.ACTION, (action_dim,))}}


def lerobot_compute_stats():
    """LeRobot's datasets/compute_stats.py (compute_episode_stats, aggregate_stats). It needs only
    numpy, but the `lerobot.datasets` package needs Hugging Face `datasets`; the file is loaded on its
    own, its one relative import (`.io_utils.load_image_as_numpy`, for image paths) answered by a
    placeholder."""
    import importlib.util
    import types

    import lerobot

    package = "reference_lerobot_stats"
    if f"{package}.compute_stats" in sys.modules:
        return sys.modules[f"{package}.compute_stats"]
    parent = types.ModuleType(package)
    parent.__path__ = []
    io_utils = types.ModuleType(f"{package}.io_utils")
    io_utils.load_image_as_numpy = None  # the records give arrays, never image files
    sys.modules.update({package: parent, f"{package}.io_utils": io_utils})
    path = Path(lerobot.__file__).parent / "datasets" / "compute_stats.py"
    spec = importlib.util.spec_from_file_location(f"{package}.compute_stats", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def train_sentencepiece(lines: list[str], vocab_size: int, options: Mapping, prefix: str) -> bytes:
    """A SentencePiece model trained on `lines`, as bytes. Training runs in a scratch folder with a
    relative model prefix (the prefix is stored in the model), and twice: the bytes must agree."""
    import tempfile

    import sentencepiece as spm

    results = []
    for _ in range(2):
        with tempfile.TemporaryDirectory() as scratch:
            here = os.getcwd()
            os.chdir(scratch)
            try:
                spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix,
                                               vocab_size=vocab_size, num_threads=1, minloglevel=2, **options)
                results.append(Path(scratch, f"{prefix}.model").read_bytes())
            finally:
                os.chdir(here)
    assert results[0] == results[1], "SentencePiece training is not reproducible"
    return results[0]
