"""BitVLA's tensors: the runtime's names, how the released checkpoint's names map onto them, the
ternary storage of BitLinear weights, and the reading of OFT's torch-pickled head files.

Runtime names (besides `lm.*`, backbone/bitnet.py, and `head.*` / `proprio.*`, heads/oft_l1.py):

    vision.patch.{weight,bias}             the patch conv as a linear [W, 3 * p * p]
    vision.position                        [tokens per camera, W]
    vision.blk.{i}.{ln1,ln2}.{weight,bias}
    vision.blk.{i}.{attn_q,attn_k,attn_v,attn_out,fc1,fc2}.{weight,bias}
    connector.{fc1,fc2}.{weight,bias}      LLaVA's multi_modal_projector linear_1 / linear_2

Only the vision layers up to the one the connector reads are kept; SigLIP's post-layernorm and
pooling head, and the LM's tied output head, are never read.

A BitLinear weight (every LM projection; the vision tower's when its weight bits are 1) is stored
as the reference uses it, ternarized: `<name>` in TQ2_0 (2.06 bits a weight; rows zero-padded to a
multiple of 256 inputs) and `<name minus .weight>.scale`, the reference's s_w as one float32
(w = q / s_w; the f16 scale inside each TQ2_0 block is s_w's inverse rounded, for other GGUF readers).
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import bitnet
from embodied_ros.backbone.siglip import TRANSFORMERS_LAYER_NAMES as SIGLIP_LAYER_NAMES
from embodied_ros.heads import oft_l1
from embodied_ros.kernels.cpu.ternary_gemm import (TQ2_0_BLOCK, TernaryWeight, pack_ternary, ternarize, tq2_0_codes,
                                                   tq2_0_encode)
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.models.bitvla.config import BitVLAConfig

VISION_BIT_LINEARS = ("attn_q", "attn_k", "attn_v", "attn_out", "fc1", "fc2")

_VISION = r"(?:model\.)?vision_tower\.vision_model\."
_LM = r"(?:model\.)?language_model\.(?:model\.)?"


def runtime_name(name: str) -> str | None:
    """A released checkpoint's parameter name -> the runtime's (None: never read); ValueError if unknown."""
    simple = {_VISION + r"embeddings\.patch_embedding\.(weight|bias)": r"vision.patch.\1",
              _VISION + r"embeddings\.position_embedding\.weight": "vision.position",
              r"(?:model\.)?multi_modal_projector\.linear_([12])\.(weight|bias)": r"connector.fc\1.\2",
              _LM + r"embed_tokens\.weight": "lm.token_embd",
              _LM + r"norm\.weight": "lm.final_norm.weight"}
    for pattern, replacement in simple.items():
        if re.fullmatch(pattern, name):
            return re.sub(pattern, replacement, name)
    if (re.fullmatch(_VISION + r"(post_layernorm|head)\..*", name)
            or re.fullmatch(r"(?:language_model\.)?lm_head\.weight", name)):
        return None
    match = re.fullmatch(_VISION + r"encoder\.layers\.(\d+)\.(.+)\.(weight|bias)", name)
    if match and match.group(2) in SIGLIP_LAYER_NAMES:
        return f"vision.blk.{match.group(1)}.{SIGLIP_LAYER_NAMES[match.group(2)]}.{match.group(3)}"
    match = re.fullmatch(_LM + r"layers\.(\d+)\.(.+)\.weight", name)
    if match and match.group(2) in bitnet.LAYER_NAMES:
        return f"lm.blk.{match.group(1)}.{bitnet.LAYER_NAMES[match.group(2)]}.weight"
    raise ValueError(name)


def rename(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The released model.safetensors' tensors -> runtime names (the patch conv flattened)."""
    renamed, unknown = {}, []
    for name, value in state_dict.items():
        try:
            ours = runtime_name(name)
        except ValueError:
            unknown.append(name)
            continue
        if ours is not None:
            renamed[ours] = np.asarray(value)
    if unknown:
        raise ValueError(f"not a BitVLA checkpoint: unexpected tensors {', '.join(unknown[:5])}"
                         + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))
    patch = renamed.get("vision.patch.weight")
    if patch is not None and patch.ndim == 4:
        renamed["vision.patch.weight"] = patch.reshape(patch.shape[0], -1)
    return renamed


def is_bit_linear(name: str, config: BitVLAConfig) -> bool:
    """Weights the reference ternarizes (stored in TQ2_0 with their scale)."""
    part = name.split(".")
    if name.startswith("lm.blk.") and name.endswith(".weight"):
        return part[3] in bitnet.BIT_LINEARS
    if name.startswith("vision.blk.") and name.endswith(".weight") and config.ternary_vision:
        return part[3] in VISION_BIT_LINEARS
    return False


def scale_name(name: str) -> str:
    return name[:-len(".weight")] + ".scale"


def padded(width: int) -> int:
    return -(-width // TQ2_0_BLOCK) * TQ2_0_BLOCK


def expected_shapes(config: BitVLAConfig) -> dict[str, tuple[int, ...]]:
    """Logical shapes of every runtime tensor (a ternary weight's stored shape is padded, `stored_shapes`)."""
    v, lm = config.vision, config.lm
    shapes: dict[str, tuple[int, ...]] = {
        "vision.patch.weight": (v.width, v.patch_features), "vision.patch.bias": (v.width,),
        "vision.position": (v.tokens_per_camera, v.width),
        "connector.fc1.weight": (lm.width, v.width), "connector.fc1.bias": (lm.width,),
        "connector.fc2.weight": (lm.width, lm.width), "connector.fc2.bias": (lm.width,),
        "lm.token_embd": (lm.vocab_size, lm.width), "lm.final_norm.weight": (lm.width,),
    }
    for i in range(v.depth):
        layer = {"ln1": (v.width,), "ln2": (v.width,), "attn_q": (v.width, v.width), "attn_k": (v.width, v.width),
                 "attn_v": (v.width, v.width), "attn_out": (v.width, v.width), "fc1": (v.mlp_dim, v.width),
                 "fc2": (v.width, v.mlp_dim)}
        for part, shape in layer.items():
            shapes[f"vision.blk.{i}.{part}.weight"] = shape
            shapes[f"vision.blk.{i}.{part}.bias"] = shape[:1]
    for i in range(lm.depth):
        shapes.update({f"lm.blk.{i}.{name}": shape for name, shape in bitnet.layer_shapes(lm).items()})
    shapes.update(oft_l1.head_shapes(lm.width, config.action_dim, config.head_blocks))
    if config.use_proprio:
        shapes.update(oft_l1.proprio_shapes(lm.width, config.proprio_dim))
    return shapes


def stored_shapes(config: BitVLAConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of a bundle as stored: ternary weights padded, with their scales."""
    shapes = {}
    for name, shape in expected_shapes(config).items():
        if is_bit_linear(name, config):
            shapes[name] = (shape[0], padded(shape[1]))
            shapes[scale_name(name)] = (1,)
        else:
            shapes[name] = shape
    return shapes


def check_shapes(tensors: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], what: str) -> None:
    missing = [name for name in expected if name not in tensors]
    if missing:
        raise ValueError(f"{what} lacks {len(missing)} tensors, e.g. {', '.join(missing[:4])}")
    wrong = [f"{name} {tuple(tensors[name].shape)} (expected {shape})" for name, shape in expected.items()
             if tuple(tensors[name].shape) != tuple(shape)]
    if wrong:
        raise ValueError(f"{what} does not match its config: {'; '.join(wrong[:4])}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise ValueError(f"{what} holds tensors its config does not describe: {', '.join(extra[:4])}")


def tensor_group(name: str) -> str:
    """Quantization-plan groups: vision, connector, lm (the LM's norms; its BitLinears are ternary
    whatever the plan), embedding, heads (action head and proprio projector)."""
    if name == "lm.token_embd":
        return "embedding"
    if name.startswith(("head.", "proprio.")):
        return "heads"
    return name.split(".", 1)[0]


# ---- ternary storage ------------------------------------------------------------------------------

def ternary_tensors(name: str, weight: np.ndarray) -> dict[str, Any]:
    """A full-precision BitLinear weight -> {name: TQ2_0 QuantTensor, scale name: [s_w]}, as the
    reference ternarizes it."""
    q, scale = ternarize(weight)
    n_out, n_in = q.shape
    codes = np.zeros((n_out, padded(n_in)), np.int8)
    codes[:, :n_in] = q
    data = tq2_0_encode(codes, float(np.float32(1.0) / scale))
    return {name: QuantTensor("tq2_0", codes.shape, data), scale_name(name): np.array([scale], np.float32)}


def ternary_of(stored: Mapping[str, Any], name: str, n_in: int) -> tuple[np.ndarray, np.float32]:
    """(q int8 [out, in], s_w) of a stored ternary weight."""
    tensor = stored[name]
    if not isinstance(tensor, QuantTensor) or tensor.qtype != "tq2_0":
        raise ValueError(f"{name}: a BitLinear weight must be stored as tq2_0, got "
                         f"{getattr(tensor, 'qtype', np.asarray(tensor).dtype)}")
    q = tq2_0_codes(np.asarray(tensor.data).reshape(tensor.shape[0], -1), tensor.shape[1])
    return q[:, :n_in], np.float32(np.asarray(stored[scale_name(name)]).reshape(-1)[0])


def packed_ternary(stored: Mapping[str, Any], name: str, n_in: int) -> TernaryWeight:
    q, scale = ternary_of(stored, name, n_in)
    return pack_ternary(q, scale)


# ---- OFT's head files: torch.save archives, read without torch --------------------------------------

_STORAGE_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
                   "BFloat16Storage": "bfloat16", "LongStorage": np.int64, "IntStorage": np.int32,
                   "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


def _storage_array(raw: bytes, kind) -> np.ndarray:
    if kind == "bfloat16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, kind)


def _rebuild_tensor(storage, offset, size, stride, *unused) -> np.ndarray:
    itemsize = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * itemsize for s in stride))
    return np.array(view)


def load_torch_state_dict(path: Path) -> dict[str, np.ndarray]:
    """A state dict written by `torch.save` (zip format) as numpy arrays; bfloat16 widened to float32.
    Only tensors, dicts and the classes a state dict holds are unpickled; anything else is refused."""
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ValueError(f"{path}: not a torch.save archive (no single data.pkl)")
        root = pickles[0][:-len("data.pkl")]
        if root + "byteorder" in archive.namelist() and archive.read(root + "byteorder").strip() != b"little":
            raise ValueError(f"{path}: big-endian torch archives are not supported")
        storages: dict[str, np.ndarray] = {}

        class Unpickler(pickle.Unpickler):
            def find_class(self, module: str, name: str):
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return _rebuild_tensor
                if (module, name) == ("collections", "OrderedDict"):
                    return OrderedDict
                if module == "torch" and name in _STORAGE_DTYPES:
                    return name
                raise pickle.UnpicklingError(f"{path}: refusing to unpickle {module}.{name}")

            def persistent_load(self, pid):
                kind, storage_type, key, _location, _numel = pid
                if kind != "storage" or storage_type not in _STORAGE_DTYPES:
                    raise pickle.UnpicklingError(f"{path}: unknown storage {pid!r}")
                if key not in storages:
                    storages[key] = _storage_array(archive.read(f"{root}data/{key}"), _STORAGE_DTYPES[storage_type])
                return storages[key]

        loaded = Unpickler(io.BytesIO(archive.read(pickles[0]))).load()
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: holds a {type(loaded).__name__}, not a state dict")
    return {str(name): np.asarray(value) for name, value in loaded.items()}
