#!/usr/bin/env python
"""Wan transformer-block records (test/data/wan_block_tiny, test/data/extra/wan_block_*): one
diffusers `WanTransformerBlock` on random weights, run on random inputs with both forms of the time
embedding, written as block.safetensors (diffusers' parameter names), config.json and cases.npz.

    python gen_wan_block.py [SPEC.json] OUT_DIR      (reference environment; specs in specs/)

Weights: `common.wan_rule` from a generator seeded with seeds.weights, in named_parameters() order.
Inputs, from a generator seeded with seeds.data, per case: hidden states (1, S, dim), text states
(1, text_len, dim), 0.5 * a time embedding, per token (1, S, 6, dim) for case 0 and global
(1, 6, dim) for case 1. RoPE comes from diffusers' `WanRotaryPosEmbed` for the latent grid. Each case
runs twice (must agree bit for bit), and perturbing any one parameter tensor must change case 0.
"""

from __future__ import annotations

import common  # noqa: F401  (sets the offline environment first)

import torch
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed, WanTransformerBlock

DEFAULTS = {
    "name": "wan_block_tiny",
    "dim": 64, "ffn_dim": 160, "num_heads": 4, "eps": 1e-6,
    "qk_norm": "rms_norm_across_heads", "cross_attn_norm": True,
    "grid": [2, 4, 4],            # latent frames, rows, columns after patching
    "patch_size": [1, 2, 2], "text_len": 8, "rope_max_seq_len": 1024, "rope_theta": 10000.0,
    "seeds": {"weights": 41, "data": 42, "perturbation": 12345},
}
FULL_SIZE = {"dim": 3072, "ffn_dim": 14336, "num_heads": 24, "num_layers": 30}  # Wan2.2 TI2V-5B


def main() -> None:
    spec, out, _ = common.command_line(DEFAULTS, __doc__)
    dim, heads = spec["dim"], spec["num_heads"]
    head_dim = dim // heads
    frames, rows, cols = spec["grid"]
    pt, ph, pw = spec["patch_size"]
    tokens = frames * rows * cols
    seeds = spec["seeds"]

    block = WanTransformerBlock(dim, spec["ffn_dim"], heads, spec["qk_norm"], spec["cross_attn_norm"], spec["eps"],
                                None).eval()
    common.redraw(block, seeds["weights"], common.wan_rule)
    rope = WanRotaryPosEmbed(head_dim, (pt, ph, pw), spec["rope_max_seq_len"], theta=spec["rope_theta"])
    latent_shape = [1, 1, frames * pt, rows * ph, cols * pw]  # RoPE reads only the shape
    cos, sin = rope(torch.zeros(latent_shape))
    assert cos.shape == (1, tokens, 1, head_dim)

    data = common.rng(seeds["data"])
    cases = []
    for per_token in (True, False):
        hidden = torch.randn(1, tokens, dim, generator=data)
        text = torch.randn(1, spec["text_len"], dim, generator=data)
        temb = 0.5 * torch.randn(*((1, tokens, 6, dim) if per_token else (1, 6, dim)), generator=data)
        cases.append({"hidden": hidden, "text": text, "temb": temb})

    def forward(case):
        return block(case["hidden"], case["text"], case["temb"], (cos, sin))

    with torch.no_grad():
        for case in cases:
            case["out"] = forward(case)
            assert torch.equal(case["out"], forward(case)), "the block is not repeatable"
        changes = {}
        kick = common.rng(seeds["perturbation"])
        for name, p in block.named_parameters():
            saved = p.detach().clone()
            p.add_(0.01 * torch.randn(p.shape, generator=kick))
            changes[name] = float((forward(cases[0]) - cases[0]["out"]).abs().max())
            p.copy_(saved)
        assert torch.equal(forward(cases[0]), cases[0]["out"])
    assert min(changes.values()) > 1e-5, f"a parameter does not reach the output: {min(changes, key=changes.get)}"

    arrays = {}
    for k, case in enumerate(cases):
        arrays[f"case{k}_hidden_states"] = case["hidden"].numpy()
        arrays[f"case{k}_encoder_hidden_states"] = case["text"].numpy()
        arrays[f"case{k}_temb"] = case["temb"].numpy()
        arrays[f"case{k}_rotary_cos"] = cos.numpy()
        arrays[f"case{k}_rotary_sin"] = sin.numpy()
        arrays[f"case{k}_output"] = case["out"].numpy()
    weights = common.state_dict_of(block)

    with torch.device("meta"):
        full = WanTransformerBlock(FULL_SIZE["dim"], FULL_SIZE["ffn_dim"], FULL_SIZE["num_heads"],
                                   "rms_norm_across_heads", True, 1e-6, None)
    full_params = sum(p.numel() for p in full.parameters())
    third = 2 * (head_dim // 6)
    config = {
        "set": spec["name"],
        "module": "diffusers.models.transformers.transformer_wan.WanTransformerBlock",
        "constructor": {"dim": dim, "ffn_dim": spec["ffn_dim"], "num_heads": heads, "qk_norm": spec["qk_norm"],
                        "cross_attn_norm": spec["cross_attn_norm"], "eps": spec["eps"], "added_kv_proj_dim": None},
        "dim": dim, "ffn_dim": spec["ffn_dim"], "num_heads": heads, "head_dim": head_dim, "eps": spec["eps"],
        "qk_norm": spec["qk_norm"], "qk_norm_shape": [dim], "cross_attn_norm": spec["cross_attn_norm"],
        "added_kv_proj_dim": None,
        "ffn_activation": "GELU, tanh approximation (diffusers 'gelu-approximate')",
        "grid_fhw": [frames, rows, cols], "seq_len": tokens,
        "token_order": "token s = (f*H + h)*W + w: frames, then rows, then columns, row-major",
        "patch_size_assumption": [pt, ph, pw],
        "latent_shape_for_rope": latent_shape,
        "text_len": spec["text_len"],
        "rotary": {"class": "diffusers WanRotaryPosEmbed", "attention_head_dim": head_dim,
                   "theta": spec["rope_theta"], "max_seq_len": spec["rope_max_seq_len"],
                   "split_t_h_w": [head_dim - 2 * third, third, third],
                   "format": "(cos, sin), float32 (1, S, 1, head_dim) each; every value appears twice (channels 2i "
                             "and 2i+1) and rotates the adjacent pair (x[2i], x[2i+1])"},
        "temb_formats": {"case0": "per token (1, S, 6, dim), as Wan2.2 TI2V-5B passes it (expand_timesteps)",
                         "case1": "global (1, 6, dim), as Wan2.1 and Wan2.2-14B pass it"},
        "weights_dtype": "float32",
        "weight_init": "one torch.Generator seeded with seed.weights, block.named_parameters() order: "
                       "scale_shift_table 0.3*randn, norm_q / norm_k / norm2 weights 1 + 0.2*randn, other vectors "
                       "0.1*randn, matrices randn * in_features**-0.5",
        "inputs_init": "one torch.Generator seeded with seed.data, per case: hidden_states randn, "
                       "encoder_hidden_states randn, temb 0.5*randn",
        "max_abs_output": {f"case{k}": float(c["out"].abs().max()) for k, c in enumerate(cases)},
        "determinism": {"two_runs_bit_identical": True},
        "parameter_sensitivity_min_max_abs_change": min(changes.values()),
        "n_params": common.count(weights),
        "full_size_block_wan22_ti2v_5b": {**{k: FULL_SIZE[k] for k in ("dim", "ffn_dim", "num_heads")},
                                          "head_dim": FULL_SIZE["dim"] // FULL_SIZE["num_heads"],
                                          "num_layers": FULL_SIZE["num_layers"], "params": full_params,
                                          "bf16_bytes": 2 * full_params,
                                          "bf16_mib": round(2 * full_params / 2 ** 20, 2)},
        "generated_by": common.generated_by("reference/gen_wan_block.py", "diffusers", "torch", "numpy"),
        "seed": {"weights": seeds["weights"], "data": seeds["data"]},
    }
    common.write_record(out, weights=weights, weights_file="block.safetensors", config=config, arrays=arrays)
    print(f"wrote {out}: {config['n_params']} parameters, max |out| "
          f"{max(config['max_abs_output'].values()):.4f}")


if __name__ == "__main__":
    main()
