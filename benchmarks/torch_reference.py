"""PyTorch reference timings for the benchmarks (LeRobot pi0.5, transformers, diffusers on CPU).

Runs in the PyTorch reference environment (docs/reference.md), not in the project's own one; the
benchmark scripts call it through `common.run_torch_reference`, which runs it as a subprocess.

    python benchmarks/torch_reference.py MODE [--tokens N] [--prefix-tokens N] [--text-tokens N]
                                              [--repeats R] [--warmup W] [--dtype f32|bf16|both]
                                              [--threads T] [--record DIR] --json

MODE:
  pi05_small    PI05Policy.predict_action_chunk on a pi0.5 reference record (default
                test/data/pi05_small, case 0): vision, prefix, each Euler step and total, plus
                max_abs_err against the record's actions. --dtype f32 or bf16 (LeRobot's own
                dtype="bfloat16" setting).
  pi0_small     PI0Policy.predict_action_chunk on a pi0 reference record (--record, e.g. one made
                by reference/gen_pi0.py from benchmarks/specs/pi0_small.json), timed as pi05_small.
  siglip_layer  one SigLIP encoder layer, width 1152, 16 heads, mlp 4304 (transformers
                SiglipEncoderLayer, sdpa attention as in LeRobot's vision tower); --tokens default 256.
  gemma_layer   one Gemma-2B decoder layer of the pi0.5 prefix pass, width 2048, 8 heads x 256,
                1 KV head, mlp 16384 (LeRobot's PiGemma decoder layer, eager attention, bidirectional
                mask, writing the K/V cache); --tokens default 968.
  expert_layer  one action-expert layer, width 1024, 8 heads x 256, 1 KV head, mlp 4096, adaptive
                RMSNorm, over the chunk's tokens reading a cached prefix K/V (LeRobot's PiGemma
                decoder layer with a transformers DynamicCache); --tokens default 50 (the chunk),
                --prefix-tokens default 968.
  wan_block     one Wan2.2-TI2V-5B block, dim 3072, 24 heads, ffn 14336 (diffusers
                WanTransformerBlock, per-token time embedding); --tokens default 880 (one latent
                frame of a 704x1280 video), --text-tokens default 512.

Output (one JSON object on stdout): mode, implementation, threads, shape, measurements (a list of
{name, dtype, flops, median_ms, runs_ms, gflops_per_s}), memory (rss_before_mb, peak_rss_mb,
weights_mb), versions, machine. FLOPs follow common.py's convention. Layer weights are random.
Exit status: 0 measured, 2 bad arguments or input, 3 torch / lerobot / diffusers not importable.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

MODES = ("pi05_small", "pi0_small", "siglip_layer", "gemma_layer", "expert_layer", "wan_block")
DEFAULT_RECORD = common.REPO_ROOT / "test" / "data" / "pi05_small"
SIGLIP = dict(width=1152, heads=16, mlp=4304, tokens=256)
GEMMA_2B = dict(width=2048, heads=8, kv_heads=1, head_dim=256, mlp=16384, tokens=968)
EXPERT = dict(width=1024, heads=8, kv_heads=1, head_dim=256, mlp=4096, tokens=50, prefix_tokens=968)
WAN_5B = dict(dim=3072, heads=24, ffn=14336, tokens=880, text_tokens=512)


def require_reference_packages(mode: str) -> dict:
    """Import what MODE needs; exit with status 3 and a clear message when it is not installed."""
    needed = ["torch", "safetensors"] + (["diffusers"] if mode == "wan_block" else ["transformers", "lerobot"])
    versions = {}
    for name in needed:
        try:
            module = __import__(name)
        except ImportError as err:
            print(f"torch_reference: the PyTorch reference environment is not available here "
                  f"({name}: {err}); install it as described in docs/reference.md and run this script "
                  f"with that environment's python", file=sys.stderr)
            sys.exit(common.EXIT_REFERENCE_MISSING)
        versions[name] = getattr(module, "__version__", "?")
    return versions


def measurement(name: str, flops: float, timing: common.Timing, dtype: str = "f32") -> dict:
    return {"name": name, "dtype": dtype, "flops": flops, **timing.as_dict(),
            "gflops_per_s": round(common.gflops_per_s(flops, timing.median_ms), 2)}


def torch_dtype(name: str):
    import torch
    return {"f32": torch.float32, "bf16": torch.bfloat16}[name]


# ---------------------------------------------------------------- pi05_small

def bench_pi05_small(args) -> dict:
    import torch_pi05_policy as pi05
    if args.dtype == "both":
        raise ValueError("pi05_small runs one dtype per process: --dtype f32 or bf16")
    dtype = {"f32": "float32", "bf16": "bfloat16"}[args.dtype]
    record = Path(args.record or DEFAULT_RECORD)
    if not record.is_dir():
        raise FileNotFoundError(f"no pi0.5 reference record at {record}; pass --record DIR, a folder with "
                                f"model.safetensors, config.json and cases.npz")
    config, cases = pi05.read_record(record)
    policy = pi05.build_policy(config, record / "model.safetensors", dtype)
    batch, noise = pi05.case_batch(config, cases, 0)
    clock = pi05.StageClock(policy)
    outputs = []
    total = common.time_repeats(lambda: outputs.append(policy.predict_action_chunk(batch, noise=noise.clone())),
                                args.repeats, args.warmup, setup=clock.start_run)
    errors = [float(abs(outputs[-1][0].float().numpy() - cases["case0_actions"]).max())]
    for k in range(1, len(config["cases"])):  # the other cases once each, untimed, for the record's error
        case_batch, case_noise = pi05.case_batch(config, cases, k)
        clock.start_run()
        actions = policy.predict_action_chunk(case_batch, noise=case_noise)[0].float().numpy()
        errors.append(float(abs(actions - cases[f"case{k}_actions"]).max()))
    timed_runs = clock.runs[args.warmup:args.warmup + args.repeats]
    flops = common.flops_pi05_chunk(config)
    stages = [measurement("vision", flops["vision"], common.Timing([sum(r["vision"]) for r in timed_runs]),
                          args.dtype),
              measurement("prefix", flops["prefix"], common.Timing([sum(r["prefix"]) for r in timed_runs]), args.dtype)]
    steps = config["num_inference_steps"]
    for s in range(steps):
        stages.append(measurement(f"expert_step_{s}", flops["expert_step"],
                                  common.Timing([r["expert_steps"][s] for r in timed_runs]), args.dtype))
    stages.append(measurement("expert_steps_sum", steps * flops["expert_step"],
                              common.Timing([sum(r["expert_steps"]) for r in timed_runs]), args.dtype))
    stages.append(measurement("total", flops["total"], total, args.dtype))
    policy_name = "PI0Policy" if pi05.is_pi0(config) else "PI05Policy"
    return {"implementation": f"lerobot {policy_name}.predict_action_chunk, no pre/post-processor, batch 1, case 0",
            "shape": {"record": str(record), "n_cameras": config["n_cameras"], "prefix_len": config["prefix_len"],
                      "chunk_size": config["chunk_size"], "num_inference_steps": steps},
            "measurements": stages,
            "max_abs_err_vs_record": max(errors), "max_abs_err_per_case": errors,
            "weights_mb": sum(p.numel() * p.element_size() for p in policy.parameters()) / 2**20}


# ---------------------------------------------------------------- single full-size layers

def bench_siglip_layer(args) -> dict:
    import torch
    from transformers import SiglipVisionConfig
    from transformers.models.siglip.modeling_siglip import SiglipEncoderLayer
    tokens = args.tokens or SIGLIP["tokens"]
    config = SiglipVisionConfig(hidden_size=SIGLIP["width"], intermediate_size=SIGLIP["mlp"],
                                num_attention_heads=SIGLIP["heads"], hidden_act="gelu_pytorch_tanh",
                                layer_norm_eps=1e-6)
    config._attn_implementation = "sdpa"  # what LeRobot's vision tower resolves to
    flops = common.flops_siglip_layer(tokens, SIGLIP["width"], SIGLIP["mlp"])
    results, weights_mb = [], 0.0
    for dtype in args.dtypes:
        layer = SiglipEncoderLayer(config).eval().to(torch_dtype(dtype))
        x = torch.randn(1, tokens, SIGLIP["width"], dtype=torch_dtype(dtype))  # x: [1, T, D]
        with torch.no_grad():
            timing = common.time_repeats(lambda: layer(x, attention_mask=None), args.repeats, args.warmup)
        results.append(measurement("siglip_layer", flops, timing, dtype))
        weights_mb = max(weights_mb, _module_mb(layer))
        del layer
    return {"implementation": "transformers SiglipEncoderLayer (sdpa attention, no mask)",
            "shape": {"tokens": tokens, **{k: v for k, v in SIGLIP.items() if k != "tokens"}},
            "measurements": results, "weights_mb": weights_mb}


def _pi_gemma_layer(spec: dict, adarms: bool, dtype):
    from transformers import GemmaConfig
    from lerobot.policies.pi_gemma import _get_pi_gemma_decoder_layer_base
    config = GemmaConfig(hidden_size=spec["width"], intermediate_size=spec["mlp"],
                         num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
                         head_dim=spec["head_dim"], num_hidden_layers=1, hidden_activation="gelu_pytorch_tanh",
                         use_adarms=adarms, adarms_cond_dim=spec["width"] if adarms else None)
    config._attn_implementation = "eager"  # LeRobot's sample_actions sets this for the LM and the expert
    layer = _get_pi_gemma_decoder_layer_base()(config, layer_idx=0).eval().to(dtype)
    if adarms:  # the adaptive norms start at zero; random values make them do real work
        import torch
        with torch.no_grad():
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.dense.weight.normal_(0.0, spec["width"] ** -0.5)
    return config, layer


def _rotary(config, hidden, positions):
    from transformers.models.gemma.modeling_gemma import GemmaRotaryEmbedding
    return GemmaRotaryEmbedding(config)(hidden, positions)


def _attention_mask_4d(query_pad, key_pad):
    """LeRobot's additive mask: query i reads key j iff both are valid (no causal part here)."""
    from lerobot.policies.common.vla_utils import prepare_attention_masks_4d
    return prepare_attention_masks_4d(query_pad[:, :, None] & key_pad[:, None, :])


def bench_gemma_layer(args) -> dict:
    import torch
    from transformers import DynamicCache
    tokens = args.tokens or GEMMA_2B["tokens"]
    spec = GEMMA_2B
    flops = common.flops_gemma_layer(tokens, spec["width"], spec["heads"], spec["kv_heads"], spec["head_dim"],
                                     spec["mlp"])
    results, weights_mb = [], 0.0
    for dtype in args.dtypes:
        config, layer = _pi_gemma_layer(spec, adarms=False, dtype=torch_dtype(dtype))
        x = torch.randn(1, tokens, spec["width"], dtype=torch_dtype(dtype))  # x: [1, P, D]
        positions = torch.arange(tokens)[None]
        pad = torch.ones(1, tokens, dtype=torch.bool)
        mask = _attention_mask_4d(pad, pad).to(torch_dtype(dtype))
        rotary = _rotary(config, x, positions)
        cache = {}
        with torch.no_grad():
            timing = common.time_repeats(
                lambda: layer(x, attention_mask=mask, position_ids=positions, past_key_values=cache["kv"],
                              use_cache=True, position_embeddings=rotary),
                args.repeats, args.warmup, setup=lambda: cache.update(kv=DynamicCache()))
        results.append(measurement("gemma_layer", flops, timing, dtype))
        weights_mb = max(weights_mb, _module_mb(layer))
        del layer
    return {"implementation": "lerobot PiGemma decoder layer (transformers GemmaAttention/GemmaMLP, eager "
                              "attention), bidirectional prefix mask, K/V written to a DynamicCache",
            "shape": {"tokens": tokens, **{k: v for k, v in spec.items() if k != "tokens"}},
            "measurements": results, "weights_mb": weights_mb}


def bench_expert_layer(args) -> dict:
    import torch
    from transformers import DynamicCache
    spec = EXPERT
    chunk, prefix = args.tokens or spec["tokens"], args.prefix_tokens or spec["prefix_tokens"]
    flops = common.flops_gemma_layer(chunk, spec["width"], spec["heads"], spec["kv_heads"], spec["head_dim"],
                                     spec["mlp"], kv_len=prefix + chunk, adarms=True)
    results, weights_mb = [], 0.0
    for dtype in args.dtypes:
        dt = torch_dtype(dtype)
        config, layer = _pi_gemma_layer(spec, adarms=True, dtype=dt)
        x = torch.randn(1, chunk, spec["width"], dtype=dt)  # x: [1, C, D_expert]
        cond = torch.randn(1, spec["width"], dtype=dt)  # time conditioning
        prefix_k = torch.randn(1, spec["kv_heads"], prefix, spec["head_dim"], dtype=dt)  # [1, KV, P, hd]
        prefix_v = torch.randn_like(prefix_k)
        positions = prefix + torch.arange(chunk)[None]
        mask = _attention_mask_4d(torch.ones(1, chunk, dtype=torch.bool),
                                  torch.ones(1, prefix + chunk, dtype=torch.bool)).to(dt)
        rotary = _rotary(config, x, positions)
        cache = {}

        def fresh_cache():  # the layer appends the chunk's K/V, so each run starts from the prefix alone
            kv = DynamicCache()
            kv.update(prefix_k.clone(), prefix_v.clone(), 0)
            cache["kv"] = kv
        with torch.no_grad():
            timing = common.time_repeats(
                lambda: layer(x, attention_mask=mask, position_ids=positions, past_key_values=cache["kv"],
                              use_cache=False, position_embeddings=rotary, adarms_cond=cond),
                args.repeats, args.warmup, setup=fresh_cache)
        results.append(measurement("expert_layer", flops, timing, dtype))
        weights_mb = max(weights_mb, _module_mb(layer))
        del layer
    return {"implementation": "lerobot PiGemma decoder layer with adaptive RMSNorm (eager attention), reading "
                              "a prefix K/V from a transformers DynamicCache; the per-step cache copy LeRobot's "
                              "denoise_step makes is not timed",
            "shape": {"tokens": chunk, "prefix_tokens": prefix,
                      **{k: v for k, v in spec.items() if k not in ("tokens", "prefix_tokens")}},
            "measurements": results, "weights_mb": weights_mb}


def wan_grid(tokens: int) -> tuple[int, int, int]:
    """(frames, height, width) of a latent token grid with f*h*w == tokens: one latent frame is
    22 x 40 tokens (704x1280 video) when tokens is a multiple of 880, else the most square h x w."""
    if tokens % 880 == 0:
        return tokens // 880, 22, 40
    h = max(d for d in range(1, int(tokens ** 0.5) + 1) if tokens % d == 0)
    if tokens // h > 1024:
        raise ValueError(f"--tokens {tokens} has no h x w grid with both sides <= 1024; use a multiple of 880")
    return 1, h, tokens // h


def bench_wan_block(args) -> dict:
    import torch
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed, WanTransformerBlock
    spec = WAN_5B
    tokens, text = args.tokens or spec["tokens"], args.text_tokens or spec["text_tokens"]
    frames, height, width = wan_grid(tokens)
    rotary = WanRotaryPosEmbed(spec["dim"] // spec["heads"], (1, 2, 2), 1024)(
        torch.zeros(1, 1, frames, 2 * height, 2 * width))  # (cos, sin), each [1, S, 1, head_dim], float32
    flops = common.flops_wan_block(tokens, text, spec["dim"], spec["ffn"])
    results, weights_mb = [], 0.0
    for dtype in args.dtypes:
        dt = torch_dtype(dtype)
        block = WanTransformerBlock(spec["dim"], spec["ffn"], spec["heads"], "rms_norm_across_heads", True,
                                    1e-6, None).eval().to(dt)
        x = torch.randn(1, tokens, spec["dim"], dtype=dt)  # latent tokens [1, S, D]
        context = torch.randn(1, text, spec["dim"], dtype=dt)  # text tokens [1, T, D]
        temb = 0.5 * torch.randn(1, tokens, 6, spec["dim"], dtype=dt)  # per-token modulation, TI2V-5B form
        with torch.no_grad():
            timing = common.time_repeats(lambda: block(x, context, temb, rotary), args.repeats, args.warmup)
        results.append(measurement("wan_block", flops, timing, dtype))
        weights_mb = max(weights_mb, _module_mb(block))
        del block
    return {"implementation": "diffusers WanTransformerBlock (rms_norm_across_heads, cross_attn_norm, "
                              "default attention processor), RoPE from WanRotaryPosEmbed",
            "shape": {"tokens": tokens, "grid_fhw": [frames, height, width], "text_tokens": text,
                      **{k: v for k, v in spec.items() if k not in ("tokens", "text_tokens")}},
            "measurements": results, "weights_mb": weights_mb}


def _module_mb(module) -> float:
    return round(sum(p.numel() * p.element_size() for p in module.parameters()) / 2**20, 2)


BENCHES = {"pi05_small": bench_pi05_small, "pi0_small": bench_pi05_small, "siglip_layer": bench_siglip_layer,
           "gemma_layer": bench_gemma_layer,
           "expert_layer": bench_expert_layer, "wan_block": bench_wan_block}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--tokens", type=int, help="query tokens (see MODE for defaults)")
    parser.add_argument("--prefix-tokens", type=int, help="expert_layer: cached prefix length (default 968)")
    parser.add_argument("--text-tokens", type=int, help="wan_block: text tokens (default 512)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the median is reported (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    parser.add_argument("--dtype", choices=("f32", "bf16", "both"), default="f32")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--record", help=f"pi05_small: record folder (default {DEFAULT_RECORD})")
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")
    args = parser.parse_args(argv)
    for name in ("tokens", "prefix_tokens", "text_tokens", "repeats", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    args.dtypes = ["f32", "bf16"] if args.dtype == "both" else [args.dtype]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    versions = require_reference_packages(args.mode)
    import torch
    torch.set_num_threads(args.threads)
    rss_before = common.current_rss_mb()
    try:
        result = BENCHES[args.mode](args)
    except (ValueError, FileNotFoundError) as err:
        print(f"torch_reference {args.mode}: {err}", file=sys.stderr)
        return 2
    weights_mb = result.pop("weights_mb")
    output = {"mode": args.mode, "threads": torch.get_num_threads(), "repeats": args.repeats, "warmup": args.warmup,
              **result,
              "memory": {"rss_before_mb": round(rss_before, 1), "peak_rss_mb": round(common.peak_rss_mb(), 1),
                         "weights_mb": round(weights_mb, 2)},
              "versions": versions, "machine": common.machine_description()}
    print(json.dumps(output, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
