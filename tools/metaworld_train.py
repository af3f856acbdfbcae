#!/usr/bin/env python
"""Train a small pi0.5 policy on Meta-World scripted-expert demonstrations (reference environment:
LeRobot 0.6.1 + torch + mujoco 3.3 + metaworld 3.0). A developer tool; the runtime never imports it.

    python tools/metaworld_train.py OUT --tasks reach-v3 button-press-topdown-v3 --episodes 200 150 --minutes 28
    python tools/metaworld_train.py OUT2 --init OUT/checkpoint --lr 1.5e-4 --minutes 20   # go on, same demos

The shipped bundles/pi05_metaworld.gguf: 28 minutes at 3e-4, then 20 at 1.5e-4 and 20 at 1e-4, each
going on from the one before (14637 steps at batch 64 in all, 2 torch threads, final loss 0.0105).

Writes OUT/demos-<task>.npz (collected once, reused), OUT/checkpoint/ in LeRobot's save layout
(config.json, model.safetensors, policy pre/post-processor files) with tokenizer.model and training.json
beside them, saved every --save-minutes so an early checkpoint is usable, and OUT/train.log.

Recipe: demonstrations end at success; in half of them Gaussian noise (std 0.3) perturbs the executed
action while the clean expert action is the label. State and actions are quantile-normalized (LeRobot's
pi0.5 default); the bin-token embeddings start as sines/cosines of the bin value and the state bins are
jittered by up to one bin in training; images shift by up to 4 px. AdamW 3e-4, betas (0.9, 0.95), wd 0.01,
clip 1.0, 200 warm-up steps then cosine to 10% of the rate over the run (steps or minutes, whichever ends first).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
import numpy as np

TRAIN_SEED_BASE = 1_000_000  # evaluation seeds are small numbers; training goals never reuse them


def collect(task: str, episodes: int, out: Path, max_steps: int = 200) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from embodied_ros.sim.metaworld import MetaWorldTask
    env = MetaWorldTask(task)
    expert = env.expert()
    rng = np.random.default_rng(abs(hash(task)) % 2**32)
    images, states, actions, episode = [], [], [], []
    kept = 0
    for e in range(episodes):
        step = env.reset(TRAIN_SEED_BASE + e)
        noisy = e % 2 == 1
        ep_images, ep_states, ep_actions = [], [], []
        for _ in range(max_steps):
            label = np.clip(expert(), -1, 1)
            ep_images.append(step.image)
            ep_states.append(step.state)
            ep_actions.append(label)
            executed = label + (rng.normal(0, 0.3, 4) if noisy else 0)
            step = env.step(executed)
            if step.success:
                break
        if not step.success:
            continue
        kept += 1
        images += ep_images
        states += ep_states
        actions += ep_actions
        episode += [e] * len(ep_states)
    np.savez(out, images=np.stack(images), states=np.stack(states), actions=np.stack(actions).astype(np.float32),
             episode=np.array(episode))
    print(f"{task}: {kept}/{episodes} successful demonstrations, {len(states)} frames", flush=True)


def quantile_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    x = x.astype(np.float64)
    return {"mean": x.mean(0), "std": x.std(0), "min": x.min(0), "max": x.max(0),
            "q01": np.quantile(x, 0.01, axis=0), "q99": np.quantile(x, 0.99, axis=0),
            "count": np.array([len(x)])}


def chunk_indices(episode: np.ndarray, chunk: int) -> np.ndarray:
    """(N, chunk) frame indices of each frame's next `chunk` actions, the episode's last repeated."""
    n = len(episode)
    idx = np.minimum(np.arange(n)[:, None] + np.arange(chunk)[None], n - 1)
    last = np.zeros(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        last[i] = i if i == n - 1 or episode[i + 1] != episode[i] else last[i + 1]
    return np.minimum(idx, last[:, None])


def sinusoid_rows(n: int, width: int, scale: float) -> np.ndarray:
    position = np.arange(n)[:, None] / n
    freqs = np.exp(np.linspace(0, np.log(64), width // 2))[None]
    return scale * np.concatenate([np.sin(2 * np.pi * position * freqs), np.cos(2 * np.pi * position * freqs)], 1)


def train(args) -> None:
    import torch
    import lerobot.processor.tokenizer_processor as tokenizer_processor
    from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import metaworld_policy as mwp
    from embodied_ros.sim.metaworld import TASK_TEXT

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    out = Path(args.out)
    log = open(out / "train.log", "a")

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n"); log.flush()

    data = [np.load(out / f"demos-{t}.npz") for t in args.tasks]
    images = np.concatenate([d["images"] for d in data])
    states = np.concatenate([d["states"] for d in data]).astype(np.float32)
    actions = np.concatenate([d["actions"] for d in data]).astype(np.float32)
    episode = np.concatenate([d["episode"] + 100_000 * k for k, d in enumerate(data)])
    task_of = np.concatenate([np.full(len(d["states"]), k) for k, d in enumerate(data)])
    stats = {"observation.state": quantile_stats(states), "action": quantile_stats(actions)}
    say(f"{len(states)} frames from {len(np.unique(episode))} episodes of {args.tasks}")

    model_bytes = mwp.train_tokenizer()
    tokenizer = mwp.PromptTokenizer(model_bytes)
    vocab = tokenizer.sp.get_piece_size()
    mwp.apply_shrink(vocab)
    cfg = mwp.policy_config()
    policy = mwp.mp.PI05Policy(cfg)
    n_params = sum(p.numel() for p in policy.parameters())
    embed = policy.model.paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight
    with torch.no_grad():
        rows = sinusoid_rows(len(mwp.BIN_PIECES), embed.shape[1], float(embed.std()))
        embed[mwp.FIRST_BIN_ID:mwp.FIRST_BIN_ID + len(mwp.BIN_PIECES)] = torch.from_numpy(rows).float()
    if args.init:  # go on from an earlier run's weights (same demonstrations, so the same statistics)
        from safetensors.torch import load_file
        policy.load_state_dict(load_file(str(Path(args.init) / "model.safetensors")))
        say(f"weights from {args.init}")

    class LocalAutoTokenizer:  # LeRobot's processor asks transformers for PaliGemma's tokenizer by name
        @staticmethod
        def from_pretrained(name, *a, **k):
            return tokenizer

    saved_auto, tokenizer_processor.AutoTokenizer = tokenizer_processor.AutoTokenizer, LocalAutoTokenizer
    try:
        pre, post = make_pi05_pre_post_processors(cfg, dataset_stats=stats)
    finally:
        tokenizer_processor.AutoTokenizer = saved_auto

    # Prompts for every frame, computed the way the preprocessor does, checked against it on a sample.
    q01 = torch.from_numpy(stats["observation.state"]["q01"]).float()
    q99 = torch.from_numpy(stats["observation.state"]["q99"]).float()
    norm_state = (2.0 * (torch.from_numpy(states) - q01) / (q99 - q01) - 1.0).numpy()
    bins = np.digitize(norm_state, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
    texts = [TASK_TEXT[t] for t in args.tasks]
    tokens = np.zeros((len(states), mwp.PROMPT_TOKENS), dtype=np.int64)
    masks = np.zeros((len(states), mwp.PROMPT_TOKENS), dtype=bool)
    for i in range(len(states)):
        prompt = f"Task: {texts[task_of[i]]}, State: {' '.join(map(str, bins[i]))};\nAction: "
        ids, mask = tokenizer.ids(prompt, mwp.PROMPT_TOKENS)
        tokens[i], masks[i] = ids, mask
    for i in rng.choice(len(states), 8, replace=False):
        batch = pre({mwp.CAMERA_KEY: torch.from_numpy(images[i]).permute(2, 0, 1)[None].float() / 255,
                     "observation.state": torch.from_numpy(states[i])[None], "task": [texts[task_of[i]]]})
        assert np.array_equal(batch["observation.language.tokens"][0].numpy(), tokens[i]), i
    assert masks.sum(1).max() < mwp.PROMPT_TOKENS, "prompt truncated"
    a_q01 = stats["action"]["q01"].astype(np.float32)
    a_q99 = stats["action"]["q99"].astype(np.float32)
    a_range = np.where(a_q99 == a_q01, np.float32(1e-8), a_q99 - a_q01)  # LeRobot's guard
    norm_actions = 2.0 * (actions - a_q01) / a_range - 1.0
    chunks = chunk_indices(episode, mwp.CHUNK)
    bin_token = (tokens >= mwp.FIRST_BIN_ID) & (tokens < mwp.FIRST_BIN_ID + len(mwp.BIN_PIECES))

    ck = out / "checkpoint"

    def save(step, loss):
        tmp = out / "checkpoint.tmp"
        tmp.mkdir(exist_ok=True)
        policy.save_pretrained(str(tmp))
        pre.save_pretrained(str(tmp))
        post.save_pretrained(str(tmp))
        (tmp / "tokenizer.model").write_bytes(model_bytes)
        (tmp / "training.json").write_text(json.dumps({
            "tasks": args.tasks, "task_text": texts, "vocab_size": vocab, "step": step, "loss": loss,
            "frames": len(states), "parameters": n_params, "dims": mwp.DIMS,
            "state_names": list(mwp.STATE_NAMES), "action_names": list(mwp.ACTION_NAMES),
            "minutes": (time.time() - t0) / 60}, indent=1))
        if ck.exists():
            os.replace(ck, out / "checkpoint.old")
        os.replace(tmp, ck)
        if (out / "checkpoint.old").exists():
            import shutil
            shutil.rmtree(out / "checkpoint.old")
        say(f"saved step {step}")

    policy.train()
    opt = torch.optim.AdamW(policy.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    say(f"{n_params / 1e6:.2f} M parameters, vocab {vocab}, {args.threads} threads")
    t0 = last_save = time.time()
    running = None
    for step in range(1, args.steps + 1):
        progress = max(step / args.steps, (time.time() - t0) / (60 * args.minutes))
        if progress >= 1:
            break
        warm = min(1.0, step / 200)
        lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = rng.integers(0, len(states), args.batch)
        shift = rng.integers(-4, 5, (2,))
        img = np.pad(images[idx], ((0, 0), (4, 4), (4, 4), (0, 0)), mode="edge")
        img = img[:, 4 + shift[0]:4 + shift[0] + 64, 4 + shift[1]:4 + shift[1] + 64]
        tok = tokens[idx].copy()
        jitter = rng.integers(-1, 2, tok.shape)
        lo, hi = mwp.FIRST_BIN_ID, mwp.FIRST_BIN_ID + len(mwp.BIN_PIECES) - 1
        tok = np.where(bin_token[idx], np.clip(tok + jitter, lo, hi), tok)
        batch = {mwp.CAMERA_KEY: torch.from_numpy(img).permute(0, 3, 1, 2).float() / 255,
                 "observation.language.tokens": torch.from_numpy(tok),
                 "observation.language.attention_mask": torch.from_numpy(masks[idx]),
                 "action": torch.from_numpy(norm_actions[chunks[idx]])}
        loss, _ = policy.forward(batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        if not math.isfinite(loss.item()):
            sys.exit(f"step {step}: loss {loss.item()}; stopping")
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        if step % 50 == 0:
            say(f"step {step} loss {running:.4f} lr {lr:.2e} {(time.time() - t0) / step:.3f} s/step")
        if time.time() - last_save > 60 * args.save_minutes:
            policy.eval(); save(step, running); policy.train()
            last_save = time.time()
    policy.eval()
    save(step, running)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--tasks", nargs="+", default=["reach-v3", "button-press-topdown-v3"])
    p.add_argument("--episodes", nargs="+", type=int, default=[200, 150])
    p.add_argument("--steps", type=int, default=8000)
    p.add_argument("--minutes", type=float, default=25)
    p.add_argument("--save-minutes", type=float, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", help="an earlier checkpoint/ folder to go on training from (its demonstrations)")
    p.add_argument("--collect-only", nargs=2, metavar=("TASK", "EPISODES"), help=argparse.SUPPRESS)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.collect_only:
        return collect(args.collect_only[0], int(args.collect_only[1]), out / f"demos-{args.collect_only[0]}.npz")
    if len(args.episodes) != len(args.tasks):
        p.error("--episodes needs one count per task")
    jobs = [subprocess.Popen([sys.executable, __file__, str(out), "--collect-only", t, str(n)])  # one env per process
            for t, n in zip(args.tasks, args.episodes) if not (out / f"demos-{t}.npz").exists()]
    if any(j.wait() for j in jobs):
        sys.exit("collecting demonstrations failed")
    train(args)


if __name__ == "__main__":
    main()
