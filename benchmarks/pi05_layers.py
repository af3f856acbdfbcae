"""Single full-size pi0.5 layers for bench_pi05.py (`measure`), built from random weights and run
through the runtime's own layer functions (the code Pi05Model runs):

  siglip_layer  backbone.siglip.encoder_layer: SigLIP So400m (width 1152, 16 heads x 72, mlp 4304)
                over one camera's 256 patch tokens
  gemma_layer   backbone.gemma.prefix_pass over one Gemma-2B layer (width 2048, 8 heads x 256, one
                kv head, mlp 16384): 968 prefix tokens, every token reads every token (no mask),
                K/V written into a prefix cache, full layer output
  expert_layer  heads.adarms_expert.expert_layer: the Gemma-300M expert (width 1024, 8 heads x 256,
                one kv head, mlp 4096, adaptive RMSNorm) over 50 action tokens reading a 968-token
                cached K/V. The (scale, shift, gate) of its norms depend on the step time only and
                are computed once per solver step outside the layer (adarms_expert.StepConditioning).

Weights are drawn like the reference records' (randn * in_features^-0.5 for matrices, 0.1 * randn
for vectors) and stored as float32, Q8_0 or Q4_K with the converter's rule: a matrix whose input
width is not a multiple of the type's block falls back (q4_k -> q8_0 -> f16; f16 stays f16, as
Bundle.weight hands it out).
"""
from __future__ import annotations

import time
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
    """(runtime weights, stored types, MiB of the stored matrices and vectors). Matrices are packed
    for the CPU product, as Pi05Model does at start-up (`pack_for_products`: float32 panels, BF16
    into bf16 pair panels where the CPU has AVX512-BF16)."""
    from embodied_ros.bundle import QuantPlan
    from embodied_ros.bundle.quantize import quantize
    from embodied_ros.kernels.linear import pack_for_products
    from embodied_ros.kernels.quant import QuantTensor
    plan, out, types, nbytes = QuantPlan.parse(qtype), {}, set(), 0
    for name, w in weights.items():
        kind = plan.choose("layer", w.shape).qtype if w.ndim == 2 else "f32"
        stored = quantize(w, kind)
        types.add(kind)
        nbytes += stored.nbytes
        out[name] = pack_for_products(stored if isinstance(stored, QuantTensor) or stored.dtype == np.float16
                                      else np.ascontiguousarray(stored, np.float32))
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
    from embodied_ros.heads import adarms_expert
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
            modulations[id(w)] = [adarms_expert.modulation(ks, w[f"{n}.weight"], w[f"{n}.bias"], cond)
                                  for n in ("attn_norm", "ffn_norm")]
        attn, ffn = modulations[id(w)]
        return adarms_expert.expert_layer(ks, cfg, w, x, cache_kv[0], cache_kv[1], None, attn, ffn, rope)
    flops = common.flops_gemma_layer(chunk, spec["width"], spec["heads"], spec["kv_heads"], hd, spec["mlp"],
                                     kv_len=prefix + chunk, adarms=True)
    return _layer("expert_layer", flops, _gemma_shapes(spec, adarms=True), run, (chunk, spec["width"], spec["mlp"]),
                  types, rng)


BUILDERS = {"siglip_layer": siglip_layer, "gemma_layer": gemma_layer, "expert_layer": expert_layer}


def measure(args, types: tuple[str, ...], torch_runs: Callable[[str], dict | None], kernels_note: str = "") -> str:
    """Alternating rounds of the three layers (stored types interleaved) and the PyTorch layers;
    returns the BENCHMARKS.md section body. args: bench_pi05's (threads, rounds, repeats)."""
    from embodied_ros.kernels import KernelSet, reuse_freed_memory
    ks = KernelSet("numba")
    ks.compile()
    reuse_freed_memory()  # as Pi05Model does at start-up
    rng = np.random.default_rng(0)
    layers = [BUILDERS[name](ks, rng, types) for name in LAYERS]
    ours = {(layer.name, q): [] for layer in layers for q in types}
    theirs = {layer.name: [] for layer in layers}
    for _ in range(args.rounds):
        for layer in layers:
            for qtype in types:
                layer.run(layer.weights[qtype])  # untimed, as the PyTorch side's warm-up
            for _ in range(args.repeats):
                for qtype in types:  # the three stored types interleaved
                    start = time.perf_counter()
                    layer.run(layer.weights[qtype])
                    ours[layer.name, qtype].append((time.perf_counter() - start) * 1e3)
            result = torch_runs(layer.name)
            if result:
                theirs[layer.name].extend(result["measurements"][0]["runs_ms"])
    sgemm = {layer.name: common.numpy_matmul_gflops(*layer.sgemm_shape, repeats=5) for layer in layers}
    return report(args, types, layers, ours, theirs, sgemm, kernels_note)


def report(args, types, layers, ours, theirs, sgemm, kernels_note: str) -> str:
    rows, verdicts = [], []
    for layer in layers:
        rate = sgemm[layer.name]["gflops_per_s"]
        torch_runs_ms = theirs[layer.name]
        for qtype in types:
            runs = ours[layer.name, qtype]
            row = {"layer": layer.name, "implementation": "embodied_ros", "weights": qtype.upper(),
                   "stored types": "+".join(t.upper() for t in layer.stored[qtype]),
                   "weights MiB": layer.weight_mib[qtype], "best ms": min(runs), "median ms": _median(runs),
                   "GFLOP/s (best)": common.gflops_per_s(layer.flops, min(runs)),
                   "numpy sgemm GFLOP/s": rate, "runs ms": ms_list(runs)}
            if torch_runs_ms:
                row["PyTorch F32 / this (best)"] = min(torch_runs_ms) / min(runs)
                row["PyTorch F32 / this (median)"] = _median(torch_runs_ms) / _median(runs)
            rows.append(row)
        if torch_runs_ms:
            rows.append({"layer": layer.name, "implementation": "PyTorch (LeRobot / transformers)", "weights": "F32",
                         "best ms": min(torch_runs_ms), "median ms": _median(torch_runs_ms),
                         "GFLOP/s (best)": common.gflops_per_s(layer.flops, min(torch_runs_ms)),
                         "numpy sgemm GFLOP/s": rate, "runs ms": ms_list(torch_runs_ms)})
            ratio = _median(torch_runs_ms) / _median(ours[layer.name, "f32"])
            verdicts.append(f"{layer.name} {ratio:.2f}x ({'met' if ratio >= 1 else 'NOT met'})")
    columns = ["layer", "implementation", "weights", "stored types", "weights MiB", "best ms", "median ms",
               "PyTorch F32 / this (median)", "PyTorch F32 / this (best)", "GFLOP/s (best)", "numpy sgemm GFLOP/s",
               "runs ms"]
    shapes = ", ".join(f"{layer.name} {'x'.join(map(str, layer.sgemm_shape))}" for layer in layers)
    return "\n".join([
        "Single full-size pi0.5 layers, random weights, run through the runtime's own layer functions "
        "(benchmarks/pi05_layers.py): SigLIP So400m layer over 256 tokens; Gemma-2B decoder layer over 968 prefix "
        "tokens, bidirectional, writing its K/V; expert layer (Gemma-300M, adaptive RMSNorm) over 50 action tokens "
        "reading a 968-token cached K/V (its norm modulation is per solver step, computed outside the layer as the "
        f"model does). {args.threads} threads; {args.rounds} rounds, each: this runtime's three stored types "
        f"interleaved, {args.repeats} runs each, then PyTorch {args.repeats} runs in its own process "
        "(torch_reference.py MODE: transformers SiglipEncoderLayer with sdpa, LeRobot's PiGemma decoder layer with "
        "eager attention). numpy sgemm: the layer's largest product "
        f"(m x k @ k x n: {shapes}), measured in the same run.{kernels_note}",
        "", common.markdown_table(rows, columns), "",
        ("Full-size layers, PyTorch F32 / this runtime's F32 on medians (target >= 1): " + "; ".join(verdicts) + "."
         if verdicts else "No PyTorch run (--no-torch or the reference environment is missing).")])


def _median(runs: list[float]) -> float:
    return common.Timing(runs).median_ms


def ms_list(runs: list[float]) -> str:
    return ", ".join(f"{t:.1f}" for t in runs)
