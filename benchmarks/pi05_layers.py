"""Single full-size pi0.5 layers for bench_pi05.py, built from random weights and run through the
runtime's own layer functions (the code Pi05Model runs):

  siglip_layer  backbone.siglip.encoder_layer: SigLIP So400m (width 1152, 16 heads x 72, mlp 4304)
                over one camera's 256 patch tokens
  gemma_layer   backbone.gemma.prefix_pass over one Gemma-2B layer (width 2048, 8 heads x 256, one
                kv head, mlp 16384): 968 prefix tokens, every token reads every token (no mask),
                K/V written into a prefix cache, full layer output
  expert_layer  heads.action_expert.expert_layer: the Gemma-300M expert (width 1024, 8 heads x 256,
                one kv head, mlp 4096, adaptive RMSNorm) over 50 action tokens reading a 968-token
                cached K/V. The (scale, shift, gate) of its norms depend on the step time only and
                are computed once per solver step outside the layer (action_expert.StepConditioning).

Weights are drawn like the reference records' (randn * in_features^-0.5 for matrices, 0.1 * randn
for vectors) and stored as float32, Q8_0 or Q4_K with the converter's rule: a matrix whose input
width is not a multiple of the type's block falls back (q4_k -> q8_0 -> f16; f16 is expanded to
float32 once, as Bundle.weight does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import common

SIGLIP = dict(width=1152, heads=16, mlp=4304, tokens=256)
GEMMA_2B = dict(width=2048, heads=8, kv_heads=1, head_dim=256, mlp=16384, tokens=968)
EXPERT = dict(width=1024, heads=8, kv_heads=1, head_dim=256, mlp=4096, tokens=50, prefix_tokens=968)
LAYERS = ("siglip_layer", "gemma_layer", "expert_layer")


@dataclass
class Layer:
    name: str
    flops: float
    run: Callable[[dict], Any]  # weights (one stored type) -> layer output
    weights: dict[str, dict]  # stored type -> runtime weights
    stored: dict[str, list[str]]  # stored type -> the types actually stored (fallbacks included)
    weight_mib: dict[str, float]
    sgemm_shape: tuple[int, int, int]  # the layer's largest product, for numpy's rate


def _draw(rng: np.random.Generator, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    weights = {}
    for name, shape in shapes.items():
        scale = shape[-1] ** -0.5 if len(shape) > 1 else 0.1
        weights[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    for name in weights:  # norm weights near 1 (layer norms) or small offsets (Gemma's 1 + w)
        if name.startswith("ln") and name.endswith(".weight"):
            weights[name] += np.float32(1.0)
    return weights


def _store(weights: dict[str, np.ndarray], qtype: str) -> tuple[dict, list[str], float]:
    """(runtime weights, stored types, MiB of the stored matrices and vectors)."""
    from embodied_ros.bundle import QuantPlan
    from embodied_ros.bundle.quantize import quantize
    from embodied_ros.kernels.quant import QuantTensor
    plan, out, types, nbytes = QuantPlan.parse(qtype), {}, set(), 0
    for name, w in weights.items():
        kind = plan.choose("layer", w.shape).qtype if w.ndim == 2 else "f32"
        stored = quantize(w, kind)
        types.add(kind)
        nbytes += stored.nbytes
        out[name] = stored if isinstance(stored, QuantTensor) else np.ascontiguousarray(stored, np.float32)
    return out, sorted(types), nbytes / 2**20


def _layer(name, flops, shapes, run, sgemm_shape, types, rng) -> Layer:
    drawn = _draw(rng, shapes)
    weights, stored, mib = {}, {}, {}
    for qtype in types:
        weights[qtype], stored[qtype], mib[qtype] = _store(drawn, qtype)
    return Layer(name, flops, run, weights, stored, mib, sgemm_shape)


def siglip_layer(ks, rng, types) -> Layer:
    from embodied_ros.backbone import siglip
    from embodied_ros.models.pi05.config import VisionConfig
    d, mlp, t = SIGLIP["width"], SIGLIP["mlp"], SIGLIP["tokens"]
    cfg = VisionConfig(224, 14, d, 1, mlp, SIGLIP["heads"])
    shapes = {"ln1.weight": (d,), "ln1.bias": (d,), "ln2.weight": (d,), "ln2.bias": (d,),
              "attn_qkv.weight": (3 * d, d), "attn_qkv.bias": (3 * d,), "attn_out.weight": (d, d),
              "attn_out.bias": (d,), "fc1.weight": (mlp, d), "fc1.bias": (mlp,), "fc2.weight": (d, mlp),
              "fc2.bias": (d,)}
    x = rng.standard_normal((t, d), dtype=np.float32)  # x: [T, W], one camera
    return _layer("siglip_layer", common.flops_siglip_layer(t, d, mlp), shapes,
                  lambda w: siglip.encoder_layer(ks, cfg, w, x, 1), (t, d, mlp), types, rng)


def _gemma_shapes(spec: dict, adarms: bool) -> dict[str, tuple[int, ...]]:
    d, q, kv = spec["width"], spec["heads"] * spec["head_dim"], spec["kv_heads"] * spec["head_dim"]
    norms = ({"attn_norm.weight": (3 * d, d), "attn_norm.bias": (3 * d,), "ffn_norm.weight": (3 * d, d),
              "ffn_norm.bias": (3 * d,)} if adarms else {"attn_norm.weight": (d,), "ffn_norm.weight": (d,)})
    return {**norms, "attn_qkv.weight": (q + 2 * kv, d), "attn_out.weight": (d, q),
            "ffn_gate_up.weight": (2 * spec["mlp"], d), "ffn_down.weight": (d, spec["mlp"])}


def _gemma_config(spec: dict):
    from embodied_ros.models.pi05.config import GemmaConfig
    return GemmaConfig(spec["width"], 1, spec["mlp"], spec["heads"], spec["kv_heads"], spec["head_dim"])


def gemma_layer(ks, rng, types) -> Layer:
    from embodied_ros.backbone import gemma
    from embodied_ros.backbone.prefix_cache import PrefixCacheBuilder
    from embodied_ros.kernels.rope import rope_tables
    spec, cfg = GEMMA_2B, _gemma_config(GEMMA_2B)
    n = spec["tokens"]
    x = rng.standard_normal((n, spec["width"]), dtype=np.float32)  # x: [n, D] prefix embeddings
    rope = rope_tables(np.arange(n), spec["head_dim"], cfg.rope_theta)

    def run(w):
        cache = PrefixCacheBuilder.allocate(1, n, spec["kv_heads"], spec["head_dim"])
        return gemma.prefix_pass(ks, cfg, [gemma.with_kv_rows(cfg, w)], x, rope, None, cache, full_last_layer=True)
    flops = common.flops_gemma_layer(n, spec["width"], spec["heads"], spec["kv_heads"], spec["head_dim"], spec["mlp"])
    return _layer("gemma_layer", flops, _gemma_shapes(spec, adarms=False), run, (n, spec["width"], spec["mlp"]),
                  types, rng)


def expert_layer(ks, rng, types) -> Layer:
    from embodied_ros.heads import action_expert
    from embodied_ros.kernels.rope import rope_tables
    spec, cfg = EXPERT, _gemma_config(EXPERT)
    chunk, prefix, hd = spec["tokens"], spec["prefix_tokens"], spec["head_dim"]
    x = rng.standard_normal((chunk, spec["width"]), dtype=np.float32)  # x: [C, E] action tokens
    cache_kv = [rng.standard_normal((prefix, spec["kv_heads"], hd), dtype=np.float32) for _ in range(2)]
    cond = rng.standard_normal((1, spec["width"]), dtype=np.float32)  # the step's time conditioning
    rope = rope_tables(prefix + np.arange(chunk), hd, cfg.rope_theta)

    modulations = {}  # per weights: computed once, as the model does per solver step

    def run(w):
        if id(w) not in modulations:
            modulations[id(w)] = [action_expert.modulation(ks, w[f"{n}.weight"], w[f"{n}.bias"], cond)
                                  for n in ("attn_norm", "ffn_norm")]
        attn, ffn = modulations[id(w)]
        return action_expert.expert_layer(ks, cfg, w, x, cache_kv[0], cache_kv[1], None, attn, ffn, rope)
    flops = common.flops_gemma_layer(chunk, spec["width"], spec["heads"], spec["kv_heads"], hd, spec["mlp"],
                                     kv_len=prefix + chunk, adarms=True)
    return _layer("expert_layer", flops, _gemma_shapes(spec, adarms=True), run, (chunk, spec["width"], spec["mlp"]),
                  types, rng)


BUILDERS = {"siglip_layer": siglip_layer, "gemma_layer": gemma_layer, "expert_layer": expert_layer}
