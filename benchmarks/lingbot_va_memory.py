"""Memory of LingBot-VA at its released size (LIBERO config) in this runtime: file and resident bytes
per stored type of each part, and the KV slot pool. Counted from the tensor shapes the runtime
checks (heads/dual_stream.py, backbone/wan_vae.py, backbone/umt5.py) and the stored
type the quantization plan gives each tensor; no weights are needed.

    python benchmarks/lingbot_va_memory.py [--section lingbot_va_memory] [--no-write]

Resident bytes, per how the runtime holds a stored type: F32 is memory-mapped and read in place
(resident = file bytes once touched); F16/BF16 matrices are upcast to float32 once and kept
(4 bytes per weight); Q8_0/Q4_K stay encoded (resident = file bytes). The VAE encoder is upcast to
float32 when the policy is built. The text encoder is read as stored and each matrix is made
float32 only while it is used (backbone/umt5.py), once per instruction: its resident share is the
largest such matrix plus the mapped pages the OS may drop afterwards.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import markdown_table, write_section  # noqa: E402
from embodied_ros.backbone import umt5, wan_vae  # noqa: E402
from embodied_ros.bundle import QuantPlan  # noqa: E402
from embodied_ros.kernels.quant import QUANT_TYPES  # noqa: E402
from embodied_ros.heads import dual_stream as ds  # noqa: E402
from embodied_ros.models.lingbot_va.lerobot_bundle import _plan, weight_group  # noqa: E402

MIB = 2 ** 20
GIB = 2 ** 30
# LingBot-VA LIBERO release: 30 blocks of 24 x 128, 2 cameras at 128x128, 4 latent frames x 4 actions
TRANSFORMER = ds.DualStreamConfig(dim=3072, num_heads=24, ffn_dim=14336, num_layers=30, freq_dim=256, text_dim=4096,
                                  action_dim=30)
CAMERAS, IMAGE_HW, FRAMES, PER_FRAME, ATTN_WINDOW, CFG_ROWS = 2, (128, 128), 4, 4, 30, 2
# Wan2.2 VAE (diffusers AutoencoderKLWan of Wan2.2-TI2V-5B): encoder base_dim 160
VAE = wan_vae.WanVAEConfig(base_dim=160, z_dim=48, dim_mult=(1, 2, 4, 4), num_res_blocks=2,
                           temporal_downsample=(False, True, True), patch_size=2,
                           latents_mean=(0.0,) * 48, latents_std=(1.0,) * 48)
# UMT5-XXL encoder as Wan ships it
TEXT = umt5.UMT5Config(vocab_size=256384, d_model=4096, d_kv=64, num_heads=64, d_ff=10240, num_layers=24)


def umt5_shapes(cfg: umt5.UMT5Config) -> dict[str, tuple[int, ...]]:
    inner, shapes = cfg.num_heads * cfg.d_kv, {"shared.weight": (cfg.vocab_size, cfg.d_model),
                                               "encoder.final_layer_norm.weight": (cfg.d_model,)}
    for i in range(cfg.num_layers):
        attn, ffn = f"encoder.block.{i}.layer.0.", f"encoder.block.{i}.layer.1."
        shapes.update({attn + "layer_norm.weight": (cfg.d_model,), ffn + "layer_norm.weight": (cfg.d_model,),
                       **{f"{attn}SelfAttention.{m}.weight": (inner, cfg.d_model) for m in "qkv"},
                       attn + "SelfAttention.o.weight": (cfg.d_model, inner),
                       attn + "SelfAttention.relative_attention_bias.weight": (cfg.num_buckets, cfg.num_heads),
                       ffn + "DenseReluDense.wi_0.weight": (cfg.d_ff, cfg.d_model),
                       ffn + "DenseReluDense.wi_1.weight": (cfg.d_ff, cfg.d_model),
                       ffn + "DenseReluDense.wo.weight": (cfg.d_model, cfg.d_ff)})
    return shapes


def stored_bytes(qtype: str, shape: tuple[int, ...]) -> int:
    count = int(np.prod(shape))
    if qtype in QUANT_TYPES:
        spec = QUANT_TYPES[qtype]
        return count // spec.block_size * spec.block_bytes
    return count * {"f32": 4, "f16": 2, "bf16": 2}[qtype]


def part_bytes(shapes: dict[str, tuple[int, ...]], prefix: str, plan: QuantPlan,
               upcast: bool) -> tuple[int, int, int, str]:
    """(parameters, file bytes, resident bytes, stored types) of one part under `plan`."""
    params = file_bytes = resident = 0
    types = set()
    for name, shape in shapes.items():
        shape = shape if len(shape) < 5 else (*shape[:3], shape[3] * shape[4])
        qtype = plan.choose(weight_group(prefix + name), shape).qtype
        size = stored_bytes(qtype, shape)
        params += int(np.prod(shape))
        file_bytes += size
        resident += 4 * int(np.prod(shape)) if upcast and qtype in ("f16", "bf16") else size
        types.add(qtype.upper())
    return params, file_bytes, resident, "+".join(sorted(types))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--section", default="lingbot_va_memory")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    transformer = ds.tensor_shapes(TRANSFORMER)
    blocks = {n: s for n, s in transformer.items() if n.startswith("blocks.")}
    other = {n: s for n, s in transformer.items() if not n.startswith("blocks.")}
    one_block = {n: s for n, s in blocks.items() if n.startswith("blocks.0.")}
    vae, text = wan_vae.encoder_tensor_shapes(VAE), umt5_shapes(TEXT)
    rows, block_q4k = [], None
    for label in ("f32", "bf16", "q8_0", "q4_k"):
        plan = _plan(label)
        parts = {"transformer blocks (30)": part_bytes(blocks, "transformer.", plan, True),
                 "transformer embeddings, heads": part_bytes(other, "transformer.", plan, True),
                 "VAE encoder": part_bytes(vae, "vae.", plan, True)}
        text_params, text_file, _, text_types = part_bytes(text, "text_encoder.", plan, False)
        largest = max(int(np.prod(s)) for n, s in text.items() if n != "shared.weight") * 4
        if label == "q4_k":
            block_q4k = part_bytes(one_block, "transformer.", plan, True)[1]
        resident = sum(p[2] for p in parts.values()) + largest
        file_total = sum(p[1] for p in parts.values()) + text_file
        rows.append({"plan (default)": label.upper(),
                     **{f"{k} file / resident MiB": f"{v[1] / MIB:.1f} / {v[2] / MIB:.1f} ({v[3]})"
                        for k, v in parts.items()},
                     "UMT5-XXL file GiB (types)": f"{text_file / GIB:.2f} ({text_types})",
                     "bundle file GiB": f"{file_total / GIB:.2f}", "resident GiB (weights)": f"{resident / GIB:.2f}"})
    video_tokens = FRAMES * (IMAGE_HW[0] // 32) * (CAMERAS * IMAGE_HW[1] // 32)
    slots = ds.pool_slots(ATTN_WINDOW, video_tokens, FRAMES * PER_FRAME)
    pool = 2 * CFG_ROWS * TRANSFORMER.num_layers * slots * TRANSFORMER.dim * 4
    counts = (sum(int(np.prod(s)) for s in blocks.values()), sum(int(np.prod(s)) for s in other.values()),
              sum(int(np.prod(s)) for s in vae.values()), sum(int(np.prod(s)) for s in text.values()))
    body = "\n".join([
        "LingBot-VA at its released size (LIBERO config): transformer 30 blocks of dim 3072 = 24 x 128, FFN 14336, "
        f"freq 256, text 4096, 30 action channels ({counts[0] / 1e9:.3f} B parameters in the blocks, "
        f"{counts[1] / 1e6:.1f} M outside them); Wan2.2 VAE encoder, base_dim 160 ({counts[2] / 1e6:.1f} M; the "
        f"decoder, used only to show predicted frames, is not counted); UMT5-XXL encoder ({counts[3] / 1e9:.3f} B). "
        "Counted from the tensor shapes the runtime checks and the type the quantization plan stores each tensor in "
        "(no weights needed; `modulation` stays F32, the VAE and the text encoder are stored F16 when the default is a "
        "block type, 1-D tensors F32). Resident: F32 read in place from the memory-mapped file, F16/BF16 matrices "
        "upcast to float32 once, Q8_0/Q4_K kept encoded, the VAE encoder float32. The text encoder runs once per "
        "instruction on the stored (mapped) weights, each matrix made float32 only while it is used, so it counts "
        f"in the resident column only as its largest float32 matrix ({largest / MIB:.0f} MiB); its mapped pages are "
        "the OS's to drop after the prompt is encoded.",
        "",
        markdown_table(rows),
        "",
        f"KV slot pool: (attn_window 30 // 2) x ({video_tokens} video + {FRAMES * PER_FRAME} action tokens) = "
        f"{slots} slots per block; keys and values in float32 for {CFG_ROWS} CFG rows and 30 blocks: "
        f"{pool / GIB:.2f} GiB, allocated when the episode starts.",
        "",
        f"One block in Q4_K: {block_q4k / MIB:.2f} MiB (budget 88.1 MiB); its output error against the F32 block is "
        "measured by `bench_wan.py` (section wan_block: relative RMS 3.88e-02 for Q4_K, 3.04e-03 for Q8_0).",
    ])
    print(body)
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", args.section, body, command="python benchmarks/lingbot_va_memory.py")


if __name__ == "__main__":
    main()
