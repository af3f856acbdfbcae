"""BitVLA on this runtime: next to BitVLA's PyTorch code at a small size, and at the released widths.

    python benchmarks/bench_bitvla.py [--parts small,released] [--repeats 3] [--threads 2] [--workdir DIR]
                                      [--lm-layers 4] [--vision-layers 4] [--products integer,float] [--json FILE] [--no-write]

small     a random-weight BitVLA of SMALL_SPEC (2 cameras at 224 px: 512 image tokens; SigLIP 256 x 4 with
          BitLinear; BitNet 512 x 4, 8 / 2 heads of 64, mlp 1376; chunk 8 x 7, proprio 8). BitVLA's code
          writes the checkpoint in the released layout (reference/bitvla/time_reference.py `make`, once per
          workdir); this runtime converts it and runs a chunk in model space (pixel values, token ids,
          normalized proprio -> normalized actions) with integer and with float BitLinear products; the
          same inputs go to BitVLA's `predict_action` (float32, eager attention) in its own process. The
          actions of the two are compared too (random inputs are not conditioned as the records are: an
          activation rounding to a neighbouring int8 level can move them by ~1e-2, see models/bitvla/parity.py).
released  the released model's widths (SigLIP-L 1024 / 16 heads / mlp 4096 at 224 px, BitNet 2560 / 20 and 5
          heads of 128 / mlp 6912, OFT head over 8 x 7 slots), random weights made here, at --vision-layers
          and --lm-layers of 24 and 30 layers (the full depth takes ~10 GB for the float products; the
          per-layer figures scale): bundle bytes of the ternary bundle against the same tensors in bf16 (per
          layer, measured; at full depth, from them), and a chunk's latency with integer and with float
          products (2 cameras, PROMPT_TOKENS text tokens: 620 LM positions). The vocabulary is cut to 4096
          rows (a lookup; its size changes the bytes, counted at 128256, not the compute).

The PyTorch side needs the reference environment (reference/bitvla/install.sh): its interpreter in
$EMBODIED_ROS_BITVLA_PYTHON and the BitVLA checkout in $BITVLA_SOURCE; without them the small part runs
this runtime alone. Results are printed as markdown (and written to --json) and each part's section of
BENCHMARKS.md (bitvla_small, bitvla_released) is written unless --no-write.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TIME_REFERENCE = REPO / "reference" / "bitvla" / "time_reference.py"
PYTHON_ENV = "EMBODIED_ROS_BITVLA_PYTHON"
SOURCE_ENV = "BITVLA_SOURCE"
PROMPT_TOKENS = 50  # text tokens of a released-size prompt (system preamble, question, task)
FULL_VISION_LAYERS, FULL_LM_LAYERS, FULL_VOCAB = 24, 30, 128256

SMALL_SPEC = {
    "name": "bitvla_small",
    "vision": {"image_size": 224, "patch_size": 14, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
               "intermediate_size": 1024, "vit_weight_bits": 1, "vit_act_bits": 8},
    "text": {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
             "intermediate_size": 1376, "vocab_size": 640, "rope_theta": 500000.0, "rms_norm_eps": 1e-5},
    "vision_feature_layer": -1, "num_actions_chunk": 8, "action_dim": 7, "proprio_dim": 8, "use_proprio": True,
    "num_images_in_input": 2, "center_crop": True, "unnorm_key": "small_suite",
    "action_mask": [True] * 6 + [False], "tokenizer": {"bpe_vocab": 600},
    "seeds": {"torch_manual_seed": 5, "weights": 751, "data": 752}, "cases": [], "pipeline_cases": []}


# ---- this runtime ----------------------------------------------------------------------------------

def stage_times(model, pixels: np.ndarray, ids: np.ndarray, proprio, repeats: int) -> dict:
    """Median ms of each stage of a model-space chunk (and the total), after one untimed chunk."""
    runs = {"vision": [], "lm": [], "head": [], "chunk": []}
    actions = model.sample(pixels, ids, proprio)
    for _ in range(repeats):
        start = time.perf_counter()
        features = model.image_features(pixels)
        middle = time.perf_counter()
        hidden = model.action_hidden(features, ids, proprio)
        late = time.perf_counter()
        actions = model.actions(hidden)
        end = time.perf_counter()
        for name, ms in (("vision", middle - start), ("lm", late - middle), ("head", end - late), ("chunk", end - start)):
            runs[name].append(ms * 1e3)
    return {name: statistics.median(values) for name, values in runs.items()} | {"actions": actions}


# ---- small: against BitVLA's PyTorch code --------------------------------------------------------------

def small_part(args, report: dict) -> str:
    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.bitvla import convert
    from embodied_ros.models.bitvla.images import to_bfloat16
    from embodied_ros.models.bitvla.runtime import load_runtime

    python, source = os.environ.get(PYTHON_ENV), os.environ.get(SOURCE_ENV)
    have_reference = bool(python and Path(python).exists() and source)
    folder = args.workdir / "bitvla_small"
    if not (folder / "config.json").is_file():
        if not have_reference:
            return (f"small: skipped (the checkpoint is made by BitVLA's code: set ${PYTHON_ENV} and ${SOURCE_ENV}, "
                    "reference/bitvla/install.sh)")
        spec = args.workdir / "bitvla_small.json"
        spec.write_text(json.dumps(SMALL_SPEC))
        subprocess.run([python, str(TIME_REFERENCE), "make", str(spec), str(folder), "--source", source], check=True,
                       env=common.reference_environment(), capture_output=True)
    bundle_path = args.workdir / "bitvla_small.gguf"
    convert.convert(folder, bundle_path)
    rng = np.random.default_rng(0)
    runtime = load_runtime(open_bundle(bundle_path), "numba", "integer")
    cfg = runtime.config
    pixels = to_bfloat16(rng.uniform(-1, 1, (2, 3, cfg.vision.image_size, cfg.vision.image_size)).astype(np.float32))
    from embodied_ros.pipeline.types import Observation
    text = runtime.prompt(Observation(0, {}, None, "pick up the black bowl and place it on the plate"), 2)
    ids = runtime.token_ids(text)
    proprio = rng.uniform(-1, 1, cfg.proprio_dim).astype(np.float32)
    inputs = args.workdir / "bitvla_small_inputs.npz"
    np.savez(inputs, pixel_values=pixels, input_ids=ids, proprio=proprio)
    rows, ours = [], {}
    for products in ("integer", "float"):
        model = runtime.model if products == "integer" else load_runtime(open_bundle(bundle_path), "numba", products).model
        ours[products] = stage_times(model, pixels, ids, proprio, args.repeats)
        rows.append({"side": f"this runtime, {products} BitLinear products",
                     **{f"{k} ms": round(v, 2) for k, v in ours[products].items() if k != "actions"}})
    torch_result = None
    if have_reference:
        command = [python, str(TIME_REFERENCE), "run", str(folder), str(inputs), "--repeats", str(args.repeats),
                   "--threads", str(args.threads), "--source", source]
        done = subprocess.run(command, env=common.reference_environment(), capture_output=True, text=True, timeout=3600)
        line = next((l for l in done.stdout.splitlines() if l.startswith("JSON ")), None)
        if done.returncode or line is None:
            raise RuntimeError(f"the PyTorch reference failed: {done.stderr[-2000:]}")
        torch_result = json.loads(line[5:])
        rows.append({"side": f"BitVLA PyTorch (torch {torch_result['torch']}, f32, {torch_result['threads']} threads)",
                     "chunk ms": round(statistics.median(torch_result["runs_ms"]), 2)})
    body = [f"Small config: {cfg.vision.width} x {cfg.vision.depth} SigLIP (BitLinear), {cfg.lm.width} x {cfg.lm.depth} "
            f"BitNet, 2 cameras at 224 px, {ids.size} prompt tokens + {cfg.action_slots + 1} (LM positions "
            f"{ids.size + cfg.action_slots + 1}); median of {args.repeats}.", "", common.markdown_table(rows)]
    if torch_result is not None:
        expected = np.asarray(torch_result["normalized_actions"], np.float32)
        for products in ("integer", "float"):
            body.append(f"\n{products} products vs PyTorch: max abs normalized-action difference "
                        f"{np.abs(ours[products]['actions'] - expected).max():.3g}")
        body.append(f"\nchunk speed-up against PyTorch: integer "
                    f"{statistics.median(torch_result['runs_ms']) / ours['integer']['chunk']:.2f}x, float "
                    f"{statistics.median(torch_result['runs_ms']) / ours['float']['chunk']:.2f}x")
    report["small"] = {"rows": rows, "torch": torch_result}
    return "\n".join(body)


# ---- released widths ---------------------------------------------------------------------------------

def released_config(vision_layers: int, lm_layers: int):
    from embodied_ros.backbone.bitnet import BitNetConfig
    from embodied_ros.backbone.siglip import VisionConfig
    from embodied_ros.models.bitvla.config import LIBERO_ACTIONS, BitVLAConfig, TokenIds

    return BitVLAConfig(
        vision=VisionConfig(image_size=224, patch_size=14, width=1024, depth=vision_layers, mlp_dim=4096, num_heads=16),
        vision_weight_bits=1, vision_act_bits=8,
        lm=BitNetConfig(width=2560, depth=lm_layers, mlp_dim=6912, num_heads=20, num_kv_heads=5, vocab_size=4096),
        tokens=TokenIds(image=4000, proprio=4001, stop=4002), prompt_before="", prompt_after="",
        camera_names=("full_image", "wrist_image"), state_names=tuple(f"proprio_{i}" for i in range(8)),
        action_names=LIBERO_ACTIONS, chunk_size=8)


def released_tensors(config, rng) -> dict:
    """Random weights of `config` as the converter stores them (BitLinears ternary)."""
    from embodied_ros.models.bitvla import weights

    stored = {}
    for name, shape in weights.expected_shapes(config).items():
        if name == "lm.token_embd":
            value = rng.standard_normal(shape, dtype=np.float32)
        elif len(shape) == 1:
            value = (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)) if "norm" in name or "ln" in name \
                else 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            value = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[-1]))
        if weights.is_bit_linear(name, config):
            stored.update(weights.ternary_tensors(name, value))
        else:
            stored[name] = value
    return stored


def released_part(args, report: dict) -> str:
    from embodied_ros.bundle import BundleWriter, open_bundle
    from embodied_ros.models.bitvla import weights
    from embodied_ros.models.bitvla.model import BitVLAModel

    rng = np.random.default_rng(1)
    one_layer = released_config(1, 1)  # bytes per layer are exact: measured on a bundle of one layer each
    writer = BundleWriter("bitvla", "bf16", group_of=weights.tensor_group)
    writer.add_weights(released_tensors(one_layer, rng))
    path = args.workdir / "bitvla_released_one_layer.gguf"
    writer.write(path)
    bundle = open_bundle(path)
    size = {name: bundle.tensor_info(name).nbytes for name in bundle.weight_names}
    shapes = weights.expected_shapes(one_layer)
    del writer, bundle

    def layer_bytes(prefix: str) -> tuple[int, int]:
        names = [n for n in size if n.startswith(prefix)]
        return sum(size[n] for n in names), sum(2 * int(np.prod(shapes[n])) for n in shapes if n.startswith(prefix))

    lm_t, lm_b = layer_bytes("lm.blk.0.")
    vis_t, vis_b = layer_bytes("vision.blk.0.")
    rest = [n for n in shapes if not n.startswith(("lm.blk.", "vision.blk."))]
    rest_bf16 = sum(2 * int(np.prod(shapes[n])) for n in rest if n != "lm.token_embd") + 2 * FULL_VOCAB * 2560
    embedding_q8_0_saves = 2 * FULL_VOCAB * 2560 - FULL_VOCAB * 2560 // 32 * 34  # 32 int8 + an f16 scale per block
    full_t = FULL_LM_LAYERS * lm_t + FULL_VISION_LAYERS * vis_t + rest_bf16
    full_b = FULL_LM_LAYERS * lm_b + FULL_VISION_LAYERS * vis_b + rest_bf16
    mib = 2 ** 20
    size_rows = [
        {"part": "one LM layer (7 BitLinears + norms)", "ternary MiB": lm_t / mib, "bf16 MiB": lm_b / mib,
         "ratio": lm_t / lm_b},
        {"part": "one SigLIP layer (6 BitLinears + LN, biases)", "ternary MiB": vis_t / mib, "bf16 MiB": vis_b / mib,
         "ratio": vis_t / vis_b},
        {"part": f"full model: 30 + 24 layers, rest bf16 (embeddings {FULL_VOCAB} x 2560, connector, head)",
         "ternary MiB": full_t / mib, "bf16 MiB": full_b / mib, "ratio": full_t / full_b},
        {"part": "full model, the embedding table Q8_0 (`--quant embedding=q8_0`)",
         "ternary MiB": (full_t - embedding_q8_0_saves) / mib, "bf16 MiB": full_b / mib,
         "ratio": (full_t - embedding_q8_0_saves) / full_b}]
    config = released_config(args.vision_layers, args.lm_layers)
    stored = released_tensors(config, rng)
    ids = np.concatenate([[1], np.full(256, 4000), np.full(256, 4000), [4001],
                          rng.integers(5, 3900, PROMPT_TOKENS - 1)]).astype(np.int64)
    pixels = rng.uniform(-1, 1, (2, 3, 224, 224)).astype(np.float32)
    proprio = rng.uniform(-1, 1, 8).astype(np.float32)
    rows, timing = [], {}
    for products in args.products:
        start = time.perf_counter()
        model = BitVLAModel(config, stored, "numba", products)
        prepared = time.perf_counter() - start
        timing[products] = stage_times(model, pixels, ids, proprio, args.repeats)
        t = timing[products]
        scaled = (t["vision"] * FULL_VISION_LAYERS / config.vision.depth + t["lm"] * FULL_LM_LAYERS / config.lm.depth
                  + t["head"])
        rows.append({"products": products, "vision ms": t["vision"], "LM ms": t["lm"], "head ms": t["head"],
                     "chunk ms": t["chunk"], "full depth, scaled (s)": scaled / 1e3, "weights ready (s)": prepared,
                     "peak RSS (MiB)": common.peak_rss_mb()})
        del model
    report["released"] = {"sizes": size_rows, "latency": rows}
    lm_macs = config.lm.depth * (ids.size + config.action_slots + 1) * (2560 * 2560 * 2 + 2 * 2560 * 640 + 3 * 2560 * 6912)
    return "\n".join([
        "Bundle bytes (BitLinear weights in TQ2_0 + their float32 scale; every other tensor bf16 in both):", "",
        common.markdown_table(size_rows), "",
        f"Chunk latency at the released widths, {config.vision.depth} of {FULL_VISION_LAYERS} SigLIP layers and "
        f"{config.lm.depth} of {FULL_LM_LAYERS} BitNet layers, 2 cameras (512 image tokens), {ids.size} prompt tokens "
        f"+ {config.action_slots + 1} ({ids.size + config.action_slots + 1} LM positions), median of {args.repeats}; "
        "'full depth, scaled' multiplies the per-layer time (the last LM layer runs its attention output and MLP "
        "for the 56 slot rows only, so this slightly over-states the full model):", "",
        common.markdown_table(rows), "",
        f"LM BitLinear multiply-adds at this depth: {lm_macs / 1e9:.0f} G; "
        + ", ".join(f"{products} products {lm_macs / timing[products]['lm'] / 1e6:.0f} GMAC/s" for products in timing)
        + " over the whole LM pass (norms, attention and RoPE included)."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"${PYTHON_ENV}: the BitVLA reference interpreter (reference/bitvla/"
                                            f"install.sh); ${SOURCE_ENV}: the BitVLA checkout")
    parser.add_argument("--parts", default="small,released")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="numba and torch threads")
    parser.add_argument("--lm-layers", type=int, default=4)
    parser.add_argument("--vision-layers", type=int, default=4)
    parser.add_argument("--products", default="integer,float", help="released part: integer, float or both")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--no-write", action="store_true", help="leave BENCHMARKS.md as it is")
    common.add_workdir_argument(parser, "bitvla")
    args = parser.parse_args()
    parts = common.chosen(parser, "--parts", args.parts, ("small", "released"))
    args.products = common.chosen(parser, "--products", args.products, ("integer", "float"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    from embodied_ros.kernels.cpu.ternary_gemm import TERNARY_PRODUCTS  # first: it sets how the thread pool waits
    import numba
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))

    print(f"# bitvla benchmark\n\nMachine: {common.machine_line()}\n\nInteger BitLinear products on VNNI: "
          f"{TERNARY_PRODUCTS}; numba threads {numba.get_num_threads()}\n")
    report = {"machine": common.machine_description(), "cpu_features": common.cpu_features()}
    for part in parts:
        body = small_part(args, report) if part == "small" else released_part(args, report)
        print(f"## {part}\n\n{body}\n", flush=True)
        if not args.no_write:
            common.write_section(common.REPO_ROOT / "BENCHMARKS.md", f"bitvla_{part}",
                                 f"Integer BitLinear products: {TERNARY_PRODUCTS}; numba threads "
                                 f"{numba.get_num_threads()}\n\n{body}", command=common.command_line(),
                                 machine=common.machine_line())
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
