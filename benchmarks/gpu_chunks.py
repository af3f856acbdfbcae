"""Whole action chunks on a GPU: this runtime's device models (embodied_ros/gpu/) against LeRobot's
PI05Policy and SmolVLAPolicy on the same GPU, on the same random weights and inputs.

    python benchmarks/gpu_chunks.py [--size full|tiny] [--families pi05,smolvla] [--chunks 60]
                                    [--compile-modes default] [--compile-timeout 240] [--out results.json]
                                    [--engine cuda|host] [--torch-device cuda|cpu]

Per family, in one process: LeRobot's policy is built at the size asked for (full: pi0.5 at its released
dimensions with 3 cameras, SmolVLA at lerobot/smolvla_base's), every parameter re-drawn from a seeded
generator; seeded cases (images, prompt tokens, state, noise; a missing camera in one). Then
  1. LeRobot in float32: the reference actions of each case.
  2. Its state dict, renamed as the converters rename it, loads this runtime's device model (bf16
     products, float32 residual): per case the max abs action error against the float32 reference, and
     the time of a whole chunk (host images in, host actions out), p50/p99 over --chunks chunks, with
     the stages (perception, prefix, solve) timed apart; a guided solve (real-time chunking's path)
     whose guidance changes nothing against the plain one; and the runtime calls a graph makes
     (pipeline/timing.py), through the family's Runtime around the same device model.
  3. LeRobot in its bfloat16 setting (pi0.5: `to_bfloat16_for_selected_params`; SmolVLA: the VLM in
     bfloat16, the expert in float32, as a pretrained save runs): its own action error against
     float32, and its chunk time, eager (inputs already on the GPU).
  4. LeRobot's sample_actions under torch.compile, per mode, in a child process of its own (compiling can
     take minutes; --compile-timeout bounds it): the time of the first (compiling) chunk, then p50/p99.
The bf16 paths pass when this runtime's action error is within LeRobot bf16's own.

`--size tiny` builds small models of the same shapes' kinds, and with `--engine host --torch-device cpu`
dry-runs all of it on a machine without a GPU (the tests do: test/test_gpu_device_check.py).
Needs torch and lerobot (the reference environment, docs/reference.md) beside this package's
dependencies. Prints one JSON document, and writes it to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent))
sys.path.insert(0, str(BENCHMARKS))

# ---- model sizes (record layout, as the reference records' config.json) -----------------------

PI05 = {
    "full": dict(image_size=224, patch_size=14, vision=(1152, 27, 4304, 16), lm=(2048, 18, 16384, 8, 1, 256),
                 expert=(1024, 18, 4096, 8, 1, 256), vocab_size=257152, tokenizer_max_length=200, chunk_size=50,
                 cases=[(48, []), (200, [2])]),
    "tiny": dict(image_size=56, patch_size=14, vision=(48, 2, 96, 4), lm=(64, 2, 128, 8, 1, 16),
                 expert=(32, 2, 64, 8, 1, 16), vocab_size=1024, tokenizer_max_length=24, chunk_size=10,
                 cases=[(9, []), (24, [2])]),
}
SMOLVLA = {
    "full": dict(image_size=512, patch_size=16, vision=(768, 12, 3072, 12), scale_factor=4,
                 text=(960, 32, 2560, 15, 5, 64), vocab_size=49280, num_vlm_layers=16, tokenizer_max_length=48,
                 chunk_size=50, cases=[(17, []), (48, [])]),
    "tiny": dict(image_size=64, patch_size=8, vision=(32, 2, 64, 2), scale_factor=2, text=(64, 5, 128, 4, 2, 16),
                 vocab_size=512, num_vlm_layers=4, tokenizer_max_length=24, chunk_size=10, cases=[(7, []), (24, [])]),
}
CAMERAS = ("observation.images.cam0", "observation.images.cam1", "observation.images.cam2")
STATE_DIM = ACTION_DIM = 14
MAX_DIM = 32
STEPS = 10


def pi05_record(size: str) -> dict:
    s = PI05[size]
    gemma = lambda dims: dict(zip(("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim"), dims),  # noqa: E731
                              vocab_size=s["vocab_size"], rms_norm_eps=1e-6, rope_theta=10000.0)
    width, depth, mlp, heads = s["vision"]
    return {"camera_names": list(CAMERAS), "n_cameras": 3,
            "vision": dict(image_size=s["image_size"], patch_size=s["patch_size"], width=width, depth=depth, mlp_dim=mlp,
                           num_heads=heads, tokens_per_camera=(s["image_size"] // s["patch_size"]) ** 2,
                           layer_norm_eps=1e-6),
            "language_model": gemma(s["lm"]), "expert": gemma(s["expert"]), "chunk_size": s["chunk_size"],
            "max_action_dim": MAX_DIM, "max_state_dim": MAX_DIM, "action_dim": ACTION_DIM, "state_dim": STATE_DIM,
            "num_inference_steps": STEPS, "tokenizer_max_length": s["tokenizer_max_length"]}


def smolvla_record(size: str) -> dict:
    s = SMOLVLA[size]
    width, depth, mlp, heads = s["vision"]
    text_width, text_depth, text_mlp, text_heads, kv_heads, head_dim = s["text"]
    expert_width = int(text_width * 0.75)
    expert_mlp = 256 * math.ceil(4 * int(2 * expert_width / 3) / 256)
    vocab = s["vocab_size"]
    return {"camera_names": list(CAMERAS), "n_cameras": 3, "empty_cameras": 0,
            "vision": dict(image_size=s["image_size"], patch_size=s["patch_size"], width=width, depth=depth,
                           mlp_dim=mlp, num_heads=heads, layer_norm_eps=1e-6),
            "connector": {"scale_factor": s["scale_factor"]},
            "text_model": dict(width=text_width, depth=text_depth, mlp_dim=text_mlp, num_heads=text_heads,
                               num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=vocab, rms_norm_eps=1e-5,
                               rope_theta_in_config_unused=100000.0),
            "expert": dict(width=expert_width, mlp_dim=expert_mlp, num_heads=text_heads, num_kv_heads=kv_heads,
                           head_dim=head_dim, rms_norm_eps=1e-5, width_multiplier=0.75),
            "attention_mode": "cross_attn", "self_attn_every_n_layers": 2, "num_vlm_layers": s["num_vlm_layers"],
            "num_expert_layers": s["num_vlm_layers"],
            "image_marker_token_ids_unused": {"fake_image_token_id": vocab - 3, "global_image_token_id": vocab - 2,
                                              "image_token_id": vocab - 1},
            "chunk_size": s["chunk_size"], "max_action_dim": MAX_DIM, "max_state_dim": MAX_DIM,
            "action_dim": ACTION_DIM, "state_dim": STATE_DIM, "num_steps": STEPS,
            "tokenizer_max_length": s["tokenizer_max_length"],
            "time_embedding": {"dim": expert_width, "min_period": 4e-3, "max_period": 4.0}}


def draw_cases(record: dict, case_specs, image_size: int, vocab: int, seed: int) -> dict:
    """Inputs in the record layout (`case{k}_images` in [0, 1], masks, tokens, state, noise)."""
    rng = np.random.default_rng(seed)
    length, chunk = record["tokenizer_max_length"], record["chunk_size"]
    cases = {}
    for k, (valid, missing) in enumerate(case_specs):
        masks = np.array([j not in missing for j in range(len(CAMERAS))])
        tokens = rng.integers(0, vocab - 3, length).astype(np.int64)
        tokens[valid:] = 0
        cases.update({f"case{k}_images": rng.random((len(CAMERAS), 3, image_size, image_size), np.float32),
                      f"case{k}_image_masks": masks, f"case{k}_tokens": tokens,
                      f"case{k}_token_mask": np.arange(length) < valid,
                      f"case{k}_state": rng.standard_normal(STATE_DIM).astype(np.float32),
                      f"case{k}_noise": rng.standard_normal((chunk, MAX_DIM)).astype(np.float32)})
    return cases


def redraw(module, family: str, seed: int, device: str) -> None:
    """Every parameter from one seeded generator, by the reference records' recipes: matrices randn /
    sqrt(fan_in); vectors 0.1 randn, except SmolVLA's norm weights (which multiply directly), 1 + 0.1 randn."""
    import torch
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            values = torch.randn(p.shape, generator=generator, device=device, dtype=torch.float32)
            if p.ndim > 1:
                values *= (p.shape[-1] if family == "pi05" else p[0].numel()) ** -0.5
            else:
                values = values * 0.1 + (1.0 if family == "smolvla" and "norm" in name else 0.0)
            p.copy_(values.to(p.dtype))


# ---- LeRobot ----------------------------------------------------------------------------------

def build_lerobot(family: str, record: dict, device: str, seed: int):
    import torch
    if family == "pi05":
        import torch_pi05_policy as tp
        from lerobot.configs import FeatureType, PolicyFeature
        from lerobot.policies.pi05 import PI05Config
        size = record["vision"]["image_size"]
        config = PI05Config(
            device=device, dtype="float32", image_resolution=(size, size), chunk_size=record["chunk_size"],
            n_action_steps=record["chunk_size"], tokenizer_max_length=record["tokenizer_max_length"],
            max_action_dim=MAX_DIM, max_state_dim=MAX_DIM, num_inference_steps=STEPS,
            input_features={**{c: PolicyFeature(FeatureType.VISUAL, (3, size, size)) for c in CAMERAS},
                            "observation.state": PolicyFeature(FeatureType.STATE, (STATE_DIM,))},
            output_features={"action": PolicyFeature(FeatureType.ACTION, (ACTION_DIM,))})
        with tp.record_sized_constructors(record), torch.device(device):
            policy = tp.policy_module(record).PI05Policy(config)
    else:
        import torch_smolvla_policy as ts
        with torch.device(device):
            policy = ts.build_policy(record)
    policy = policy.to(device).eval()
    redraw(policy, family, seed, device)
    return policy


def lerobot_batch(family: str, cases: dict, k: int, device: str):
    import torch
    images, masks = cases[f"case{k}_images"], cases[f"case{k}_image_masks"]
    batch = {name: torch.from_numpy(images[j][None]).to(device) for j, name in enumerate(CAMERAS) if masks[j]}
    batch["observation.language.tokens"] = torch.from_numpy(cases[f"case{k}_tokens"][None]).to(device)
    batch["observation.language.attention_mask"] = torch.from_numpy(cases[f"case{k}_token_mask"][None]).to(device)
    batch["observation.state"] = torch.from_numpy(cases[f"case{k}_state"][None]).to(device)
    return batch, torch.from_numpy(cases[f"case{k}_noise"][None]).to(device)


def lerobot_actions(policy, family: str, cases: dict, k: int, device: str) -> np.ndarray:
    import torch
    batch, noise = lerobot_batch(family, cases, k, device)
    policy.reset()
    with torch.inference_mode():
        actions = policy.predict_action_chunk(batch, noise=noise)
    return actions[0].float().cpu().numpy()[:, :ACTION_DIM]


def lerobot_timing(policy, family: str, cases: dict, chunks: int, device: str, warmup: int = 3) -> dict:
    import torch
    batch, noise = lerobot_batch(family, cases, 0, device)

    def one() -> None:
        policy.reset()
        with torch.inference_mode():
            policy.predict_action_chunk({key: value.clone() for key, value in batch.items()}, noise=noise.clone())
        if device == "cuda":
            torch.cuda.synchronize()

    return timed(one, chunks, warmup)


def to_lerobot_bf16(policy, family: str) -> None:
    """LeRobot's own bfloat16 setting of the policy (what dtype="bfloat16" builds)."""
    if family == "pi05":
        policy.model.paligemma_with_expert.to_bfloat16_for_selected_params("bfloat16")
    else:  # as a pretrained save runs: the VLM in bfloat16, the expert in float32
        import torch
        policy.model.vlm_with_expert.vlm.to(torch.bfloat16)


def state_dict_arrays(policy) -> dict[str, np.ndarray]:
    return {name: tensor.detach().float().cpu().numpy() for name, tensor in policy.state_dict().items()}


# ---- this runtime -----------------------------------------------------------------------------

def engine_of(kind: str):
    if kind == "host":
        from embodied_ros.gpu.host import HostEngine
        return HostEngine()
    from embodied_ros.gpu import cuda_engine
    return cuda_engine()


def our_model(family: str, record: dict, state: dict, engine):
    if family == "pi05":
        from embodied_ros.gpu.pi05 import DevicePi05Model
        from embodied_ros.models.pi05.config import Pi05Config
        from embodied_ros.models.pi05.weights import from_lerobot
        config = Pi05Config.from_fixture_json(record)
        return DevicePi05Model(config, from_lerobot(state), engine)
    from embodied_ros.gpu.smolvla import DeviceSmolVLAModel
    from embodied_ros.models.smolvla import weights as smolvla_weights
    from embodied_ros.models.smolvla.config import SmolVLAConfig
    config = SmolVLAConfig.from_fixture_json(record)
    return DeviceSmolVLAModel(config, smolvla_weights.stack_projections(smolvla_weights.rename_lerobot(state), config),
                              engine)


def our_stages(model, family: str, cases: dict, k: int):
    """(perception, prefix, solve) of case k as three calls, for timing them apart."""
    key = f"case{k}"
    images = cases[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases[f"{key}_image_masks"]
    holder = {}

    def perception():
        holder["tokens"] = model.image_tokens(images, mask)
        model.engine.synchronize()

    def prefix():
        extra = () if family == "pi05" else (cases[f"{key}_state"],)
        holder["cache"] = model.build_prefix(holder["tokens"], mask, cases[f"{key}_tokens"],
                                             cases[f"{key}_token_mask"], *extra)
        model.engine.synchronize()

    def solve():
        holder["actions"] = model.sample_actions(holder["cache"], cases[f"{key}_noise"])[:, :ACTION_DIM]

    return perception, prefix, solve, holder


def our_actions(model, family: str, cases: dict, k: int) -> np.ndarray:
    perception, prefix, solve, holder = our_stages(model, family, cases, k)
    perception()
    prefix()
    solve()
    return holder["actions"]


def guided_identity_error(model, family: str, cases: dict) -> float:
    """A guided solve (real-time chunking's path: one captured velocity step per Euler step, the guidance
    on the host) whose guidance changes nothing, against the plain solve: max abs difference."""
    perception, prefix, solve, holder = our_stages(model, family, cases, 0)
    perception()
    prefix()
    solve()
    guided = model.sample_actions(holder["cache"], cases["case0_noise"], lambda x, v, step: v)[:, :ACTION_DIM]
    return max_error(guided, holder["actions"])


def graph_calls(model, family: str, chunks: int) -> dict:
    """The runtime calls a graph's stages make (pipeline/timing.py, as `embodied-ros up` runs them on
    their threads, one chunk every 0.1 s): the family's Runtime around the device model, with the
    tokenizer of the shipped tiny bundle (its ids fit any vocabulary here) and no normalization."""
    from embodied_ros.bundle import open_bundle
    from embodied_ros.pipeline.timing import stage_times_ms
    bundles = BENCHMARKS.parent / "bundles"
    if family == "pi05":
        from embodied_ros.models.pi05.runtime import Pi05Runtime
        from embodied_ros.sequence.tokenizer import PromptTokenizer
        tokenizer = PromptTokenizer(open_bundle(bundles / "pi05_tiny.gguf").tokenizer_model,
                                    model.config.tokenizer_max_length)
        runtime = Pi05Runtime(model, tokenizer)
    else:
        from embodied_ros.models.smolvla.runtime import SmolVLARuntime
        from embodied_ros.models.smolvla.tokenizer import SmolVLATokenizer
        tokenizer = SmolVLATokenizer(open_bundle(bundles / "smolvla_tiny.gguf").tokenizer_model,
                                     model.config.tokenizer_max_length)
        runtime = SmolVLARuntime(model, tokenizer)
    paced = stage_times_ms(runtime, repeats=chunks, period_s=0.1)
    back_to_back = stage_times_ms(runtime, repeats=chunks)
    return {"paced_0.1s_p50_ms": {k: round(v, 3) for k, v in paced.items()},
            "back_to_back_p50_ms": {k: round(v, 3) for k, v in back_to_back.items()}}


def our_timing(model, family: str, cases: dict, chunks: int, warmup: int = 3) -> dict:
    stages = our_stages(model, family, cases, 0)
    spent = {"perception": [], "prefix": [], "solve": []}

    def one() -> None:
        for name, call in zip(spent, stages[:3]):
            start = time.perf_counter()
            call()
            spent[name].append((time.perf_counter() - start) * 1e3)

    result = timed(one, chunks, warmup)
    result["stages_p50_ms"] = {name: round(statistics.median(times[warmup:]), 3) for name, times in spent.items()}
    return result


# ---- measuring --------------------------------------------------------------------------------

def timed(call, chunks: int, warmup: int) -> dict:
    for _ in range(warmup):
        call()
    started = time.time()  # the timed window, to tell processes that shared the GPU apart
    runs = []
    for _ in range(chunks):
        start = time.perf_counter()
        call()
        runs.append((time.perf_counter() - start) * 1e3)
    ordered = sorted(runs)
    return {"chunks": chunks, "p50_ms": round(statistics.median(runs), 3),
            "p99_ms": round(ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)], 3),
            "min_ms": round(ordered[0], 3), "window_s": [round(started, 1), round(time.time(), 1)]}


def max_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32)).max())


def run_family(family: str, args) -> dict:
    import torch
    size = args.size
    sizes = PI05 if family == "pi05" else SMOLVLA
    record = pi05_record(size) if family == "pi05" else smolvla_record(size)
    vocab = sizes[size]["vocab_size"]
    result: dict = {"family": family, "size": size}
    started = time.perf_counter()
    policy = build_lerobot(family, record, args.torch_device, seed=61)
    cases = draw_cases(record, sizes[size]["cases"], record["vision"]["image_size"], vocab, seed=62)
    count = len(sizes[size]["cases"])
    result["build_s"] = round(time.perf_counter() - started, 1)
    reference = [lerobot_actions(policy, family, cases, k, args.torch_device) for k in range(count)]
    result["reference_max_abs_action"] = round(max(float(np.abs(r).max()) for r in reference), 4)

    started = time.perf_counter()
    model = our_model(family, record, state_dict_arrays(policy), engine_of(args.engine))
    model.warm_up()
    result["runtime_load_s"] = round(time.perf_counter() - started, 1)
    ours = [our_actions(model, family, cases, k) for k in range(count)]
    result["runtime_error"] = round(max(max_error(a, r) for a, r in zip(ours, reference)), 5)
    result["runtime_repeat_identical"] = bool(np.array_equal(our_actions(model, family, cases, 0), ours[0]))
    result["runtime"] = our_timing(model, family, cases, args.chunks)
    result["guided_identity_error"] = guided_identity_error(model, family, cases)
    result["graph_calls"] = graph_calls(model, family, args.chunks)

    to_lerobot_bf16(policy, family)
    bf16 = [lerobot_actions(policy, family, cases, k, args.torch_device) for k in range(count)]
    result["lerobot_bf16_error"] = round(max(max_error(a, r) for a, r in zip(bf16, reference)), 5)
    result["lerobot_bf16_eager"] = lerobot_timing(policy, family, cases, args.chunks, args.torch_device)
    del policy, model
    if args.torch_device == "cuda":
        torch.cuda.empty_cache()

    result["error_vs_lerobot_bf16"] = round(result["runtime_error"] / max(result["lerobot_bf16_error"], 1e-12), 3)
    result["accuracy_pass"] = result["runtime_error"] <= result["lerobot_bf16_error"]
    eager = result["lerobot_bf16_eager"]["p50_ms"]
    result["speedup_vs_eager"] = round(eager / result["runtime"]["p50_ms"], 2)
    return result


def add_compiled(result: dict, family: str, args) -> None:
    result["compiled"] = {mode: compiled_in_child(family, mode, args) for mode in args.compile_modes}
    for compiled in result["compiled"].values():
        if "p50_ms" in compiled:
            compiled["runtime_speedup"] = round(compiled["p50_ms"] / result["runtime"]["p50_ms"], 2)


def compiled_in_child(family: str, mode: str, args) -> dict:
    """LeRobot bf16 with sample_actions under torch.compile(mode), in a child process bounded in time."""
    command = [sys.executable, __file__, "--compiled-child", family, "--size", args.size, "--chunks", str(args.chunks),
               "--torch-device", args.torch_device, "--compile-modes", mode]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.compile_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"not done within {args.compile_timeout} s (compiling included)"}
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-1500:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def compiled_child(family: str, mode: str, args) -> dict:
    import torch
    sizes = PI05 if family == "pi05" else SMOLVLA
    record = pi05_record(args.size) if family == "pi05" else smolvla_record(args.size)
    policy = build_lerobot(family, record, args.torch_device, seed=61)
    to_lerobot_bf16(policy, family)
    cases = draw_cases(record, sizes[args.size]["cases"], record["vision"]["image_size"], sizes[args.size]["vocab_size"],
                       seed=62)
    policy.model.sample_actions = torch.compile(policy.model.sample_actions, mode=mode)
    started = time.perf_counter()
    lerobot_actions(policy, family, cases, 0, args.torch_device)
    first = time.perf_counter() - started
    timing = lerobot_timing(policy, family, cases, args.chunks, args.torch_device)
    return {"mode": mode, "first_chunk_s": round(first, 1), **timing}


def write(report: dict, out: str | None) -> None:
    if out:
        Path(out).write_text(json.dumps(report, indent=1))


def device_line() -> dict:
    info = {"python": sys.version.split()[0], "numpy": np.__version__}
    try:
        import torch
        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    for name in ("cupy", "lerobot", "transformers"):
        try:
            info[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a missing package is reported as missing
            info[name] = None
    return info


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--families", default="pi05,smolvla")
    parser.add_argument("--chunks", type=int, default=60)
    parser.add_argument("--compile-modes", default="default", help="comma-separated torch.compile modes ('' for none)")
    parser.add_argument("--compile-timeout", type=float, default=240.0)
    parser.add_argument("--engine", choices=("cuda", "host"), default="cuda")
    parser.add_argument("--torch-device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out")
    parser.add_argument("--compiled-child", metavar="FAMILY",
                        help="only LeRobot's FAMILY policy under torch.compile (the first --compile-modes mode)")
    parser.add_argument("--json-out", help="with --compiled-child: write its JSON document here")
    args = parser.parse_args(argv)
    args.compile_modes = [m for m in args.compile_modes.split(",") if m]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compiled_child:
        result = compiled_child(args.compiled_child, args.compile_modes[0], args)
        write(result, args.json_out)
        print(json.dumps(result))
        return 0
    report = {"device": device_line(), "families": {}}
    ok = True
    families = args.families.split(",")
    for family in families:
        started = time.perf_counter()
        try:
            report["families"][family] = run_family(family, args)
            ok &= report["families"][family]["accuracy_pass"]
        except Exception:  # noqa: BLE001 - one family's failure is reported, the next still runs
            report["families"][family] = {"error": traceback.format_exc()[-3000:]}
            ok = False
        report["families"][family]["wall_s"] = round(time.perf_counter() - started, 1)
        write(report, args.out)
    for family in families:  # last: compiling may take minutes, the measurements above are kept meanwhile
        if "error" not in report["families"][family]:
            add_compiled(report["families"][family], family, args)
            write(report, args.out)
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
