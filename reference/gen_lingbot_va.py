#!/usr/bin/env python
"""LingBot-VA records (test/data/lingbot_va_tiny, test/data/extra/lingbot_va_*): LeRobot 0.6.1's own
`LingBotVAPolicy` (the dual-stream Wan world-action model) on random weights with its frozen modules,
driven through LeRobot's real-robot path, `predict_action` once per environment step, over several
chunks (KV cache, keyframe buffer and executed-action feedback all in play).

    python gen_lingbot_va.py [SPEC.json] OUT_DIR     (reference environment; then checks itself in a
                                                      fresh process: --verify OUT_DIR does that alone)

1. trains a SentencePiece unigram model with T5-like options (pad 0, eos 1, unk 2, no bos, NFKC) on
   generated robot instructions; transformers' T5Tokenizer wraps it (the normalizer's precompiled
   character map is read out of the .model bytes with a small protobuf wire-format reader);
2. builds a tiny UMT5EncoderModel (d_model = text_dim) and a tiny Wan2.2-layout AutoencoderKLWan
   (z_dim 48, patch 2, residual blocks, /16 spatial, /4 temporal), redraws every parameter, and saves
   them and the tokenizer into OUT/checkpoint/{text_encoder,vae,tokenizer}, where the policy loads
   them from (wan_pretrained_path "." with OUT/checkpoint as working directory);
3. builds the policy from a LingBotVAConfig at the spec's sizes (float32), redraws the transformer
   (`common.wan_rule`), builds the processors (make_lingbot_va_pre_post_processors with the action
   q01 / q99) and saves policy and processors into OUT/checkpoint;
4. runs each case through LeRobot's predict_action once per step. The only intervention: inside
   LeRobot's modeling_lingbot_va the name `torch` is bound, during a case, to a stand-in whose randn
   hands out prepared noise tensors (recorded); every other attribute is torch's. Hooks record each
   transformer call (stream, timesteps, input, output, block-0 output) and which KV-cache entries it
   attends to, evicts and writes, plus the VAE and UMT5 inputs and outputs. Each case runs twice
   (bit-identical); writes cases.npz and cases.json;
5. reloads everything in a fresh process (LingBotVAPolicy.from_pretrained + LeRobot's
   make_pre_post_processors(pretrained_path=...)) and requires every array and call log again.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import common

import numpy as np
import torch

Z_DIM = 48  # LingBotVAPolicy._infer draws 48-channel video noise (the Wan2.2 VAE's z_dim)
CPU = torch.device("cpu")
DEFAULTS = {
    "name": "lingbot_va_tiny",
    "transformer": {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 32, "ffn_dim": 128,
                    "freq_dim": 32, "text_dim": 32, "action_dim": 9, "eps": 1e-6, "rope_max_seq_len": 1024},
    "used_action_channel_ids": [0, 1, 2, 3, 4, 5, 7],
    "action_names": ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"],
    "action_q01": [-0.72, -0.81, -0.9, -0.11, -0.14, -0.2, -1.0],
    "action_q99": [0.8, 0.77, 0.93, 0.12, 0.16, 0.19, 1.0],
    "cameras": {"observation.images.image": [80, 96], "observation.images.image2": [64, 64]},  # raw H, W
    "height": 64, "width": 64,
    "frame_chunk_size": 2, "action_per_frame": 4, "attn_window": 4,
    "num_inference_steps": 3, "action_num_inference_steps": 4,
    "snr_shift": 5.0, "action_snr_shift": 0.05, "guidance_scale": 5.0, "action_guidance_scale": 1.0,
    "max_sequence_length": 24,
    "vae": {"base_dim": 4, "decoder_base_dim": 4, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2},
    "umt5": {"vocab_size": 288, "d_kv": 16, "num_heads": 2, "d_ff": 64, "num_layers": 2,
             "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128},
    "tokenizer": {"vocab_size": 256, "instruction_lines": 600},
    "torch_threads": 1,
    "seeds": {"torch_manual_seed": 20, "transformer": 21, "vae": 22, "text_encoder": 23, "tokenizer_corpus": 24,
              "data": 25, "noise": 26},
    "cases": [
        {"task": "put the black bowl on the plate", "n_chunks": 3, "guidance_scale": 5.0, "action_guidance_scale": 1.0},
        {"task": "  Pick up the &amp;quot;alphabet soup&amp;quot; and place it\n in the   basket ", "n_chunks": 2,
         "guidance_scale": 3.0, "action_guidance_scale": 2.0},
        {"task": "open the top drawer of the cabinet, take out the red mug, put it on the left plate and then "
                 "close the drawer slowly", "n_chunks": 2, "guidance_scale": 1.0, "action_guidance_scale": 1.0}],
}
TRAINER = {  # T5 / UMT5-like SentencePiece options
    "model_type": "unigram", "pad_id": 0, "eos_id": 1, "unk_id": 2, "bos_id": -1, "pad_piece": "<pad>",
    "eos_piece": "</s>", "unk_piece": "<unk>", "normalization_rule_name": "nmt_nfkc", "add_dummy_prefix": True,
    "remove_extra_whitespaces": True, "split_digits": False, "byte_fallback": False, "character_coverage": 1.0,
    "hard_vocab_limit": False, "shuffle_input_sentence": False}


# ---------------------------------------------------------------------------------------- tokenizer
def corpus(lines: int, seed: int) -> list[str]:
    draw = random.Random(seed)
    verbs = ["put", "place", "pick up", "move", "push", "pull", "open", "close", "turn on", "turn off", "stack",
             "lift", "slide", "grab", "drop", "wipe", "pour", "hang", "insert", "take out", "rotate", "press"]
    colours = ["black", "white", "red", "green", "blue", "yellow", "orange", "brown", "grey", "purple"]
    things = ["bowl", "plate", "mug", "cup", "basket", "drawer", "cabinet", "stove", "microwave", "book", "bottle",
              "box", "lid", "pan", "pot", "sponge", "towel", "cube", "block", "soup can", "ketchup", "cheese",
              "butter", "milk", "juice", "sauce", "caddy", "tray"]
    where = ["on the plate", "in the basket", "into the bowl", "on the stove", "in the top drawer", "on the shelf",
             "to the left", "to the right", "next to the mug", "onto the tray", "behind the box",
             "in front of the robot", "near the edge", "on top of the cabinet"]
    tails = ["", "", "", " slowly", " gently", " carefully", " again", " twice", " and then stop",
             " and close the drawer", " and put it back"]
    text = [f"{draw.choice(verbs)} the {draw.choice(colours)} {draw.choice(things)} {draw.choice(where)}"
            f"{draw.choice(tails)}" for _ in range(lines)]
    return text + ["open the top drawer of the cabinet and take out the mug", "0 1 2 3 4 5 6 7 8 9",
                   "Pick up the \"alphabet soup\"; then place it, and stop!", "put both cans in the basket",
                   "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z"]


def protobuf_fields(data: bytes):
    """(field number, value) of one protobuf message, wire format only (varint, 64-bit, bytes, 32-bit)."""
    def varint(i):
        value = shift = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value, i
    i = 0
    while i < len(data):
        key, i = varint(i)
        kind = key & 7
        if kind == 0:
            value, i = varint(i)
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
            value, i = data[i:i + size], i + size
        elif kind == 2:
            size, i = varint(i)
            value, i = data[i:i + size], i + size
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        yield key >> 3, value


def t5_tokenizer(model_file: Path):
    """transformers' T5Tokenizer of a SentencePiece unigram model: pieces with scores, and the
    normalizer's precompiled charsmap (ModelProto field 3 -> NormalizerSpec field 2)."""
    import sentencepiece as spm
    from transformers import T5Tokenizer

    data = model_file.read_bytes()
    normalizer = next(value for number, value in protobuf_fields(data) if number == 3)
    charsmap = next(value for number, value in protobuf_fields(normalizer) if number == 2)
    pieces = spm.SentencePieceProcessor(model_file=str(model_file))
    vocab = [(pieces.id_to_piece(i), float(pieces.get_score(i))) for i in range(pieces.get_piece_size())]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0, _spm_precompiled_charsmap=charsmap)
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    return tokenizer, pieces


# ---------------------------------------------------------------------------------------- modules
def umt5_rule(d_kv: int):
    def rule(name, p, r):
        if name.endswith("layer_norm.weight"):
            return 1.0 + 0.1 * r
        if name.endswith("relative_attention_bias.weight"):
            return 0.5 * r
        if name == "shared.weight":
            return r
        if name.endswith("SelfAttention.q.weight"):  # T5 leaves 1/sqrt(d_kv) to q's scale
            return r * (p.shape[-1] * d_kv) ** -0.5
        return r * p.shape[-1] ** -0.5
    return rule


def vae_rule(name, p, r):
    if name.endswith("gamma"):  # the RMS norms' scales
        return 1.0 + 0.1 * r
    if p.ndim == 1:
        return 0.1 * r
    return r * float(np.prod(p.shape[1:])) ** -0.5


def vae_settings(spec: dict, rng: np.random.Generator) -> dict:
    vae = spec["vae"]
    return dict(base_dim=vae["base_dim"], decoder_base_dim=vae["decoder_base_dim"], z_dim=Z_DIM,
                dim_mult=vae["dim_mult"], num_res_blocks=vae["num_res_blocks"], attn_scales=[],
                temperal_downsample=[False, True, True], dropout=0.0, is_residual=True, in_channels=12,
                out_channels=12, patch_size=2, scale_factor_temporal=4, scale_factor_spatial=16,
                latents_mean=[round(float(x), 4) for x in 0.3 * rng.standard_normal(Z_DIM)],
                latents_std=[round(float(x), 4) for x in 0.6 + 0.8 * rng.random(Z_DIM)])


def policy_config(spec: dict):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.lingbot_va import LingBotVAConfig

    t = spec["transformer"]
    return LingBotVAConfig(
        device="cpu", dtype="float32", text_encoder_device="cpu", wan_pretrained_path=".", patch_size=(1, 2, 2),
        num_attention_heads=t["num_attention_heads"], attention_head_dim=t["attention_head_dim"],
        in_channels=Z_DIM, out_channels=Z_DIM, action_dim=t["action_dim"], text_dim=t["text_dim"],
        freq_dim=t["freq_dim"], ffn_dim=t["ffn_dim"], num_layers=t["num_layers"], cross_attn_norm=True, eps=t["eps"],
        rope_max_seq_len=t["rope_max_seq_len"], attn_mode="torch", obs_cam_keys=list(spec["cameras"]),
        image_hflip=False, camera_layout="width_concat", height=spec["height"], width=spec["width"],
        action_per_frame=spec["action_per_frame"], frame_chunk_size=spec["frame_chunk_size"],
        attn_window=spec["attn_window"], num_inference_steps=spec["num_inference_steps"],
        action_num_inference_steps=spec["action_num_inference_steps"], guidance_scale=spec["guidance_scale"],
        action_guidance_scale=spec["action_guidance_scale"], snr_shift=spec["snr_shift"],
        action_snr_shift=spec["action_snr_shift"], video_exec_step=-1,
        max_sequence_length=spec["max_sequence_length"], used_action_channel_ids=list(spec["used_action_channel_ids"]),
        input_features={c: PolicyFeature(FeatureType.VISUAL, (3, *hw)) for c, hw in spec["cameras"].items()},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (len(spec["used_action_channel_ids"]),))})


def build(spec: dict, checkpoint: Path):
    """Tokenizer, text encoder, VAE, policy and processors, all saved into `checkpoint`."""
    from diffusers import AutoencoderKLWan
    from transformers import UMT5Config, UMT5EncoderModel

    from lerobot.policies.lingbot_va import LingBotVAPolicy, make_lingbot_va_pre_post_processors

    seeds = spec["seeds"]
    lines = corpus(spec["tokenizer"]["instruction_lines"], seeds["tokenizer_corpus"])
    folder = checkpoint / "tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spiece.model").write_bytes(common.train_sentencepiece(lines, spec["tokenizer"]["vocab_size"],
                                                                     TRAINER, "spiece"))
    tokenizer, pieces = t5_tokenizer(folder / "spiece.model")
    tokenizer.save_pretrained(str(folder))

    u = spec["umt5"]
    assert pieces.get_piece_size() <= u["vocab_size"]
    text_config = UMT5Config(vocab_size=u["vocab_size"], d_model=spec["transformer"]["text_dim"], d_kv=u["d_kv"],
                             d_ff=u["d_ff"], num_layers=u["num_layers"], num_heads=u["num_heads"],
                             relative_attention_num_buckets=u["relative_attention_num_buckets"],
                             relative_attention_max_distance=u["relative_attention_max_distance"], dropout_rate=0.0,
                             layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1,
                             decoder_start_token_id=0)
    common.seed_global(seeds["torch_manual_seed"])
    encoder = UMT5EncoderModel(text_config).eval()
    common.redraw(encoder, seeds["text_encoder"], umt5_rule(u["d_kv"]))
    encoder.save_pretrained(str(checkpoint / "text_encoder"))
    vae = AutoencoderKLWan(**vae_settings(spec, np.random.default_rng(seeds["vae"]))).eval()
    common.redraw(vae, seeds["vae"], vae_rule)
    vae.save_pretrained(str(checkpoint / "vae"))

    config = policy_config(spec)
    policy = LingBotVAPolicy(config).eval()
    common.redraw(policy.transformer, seeds["transformer"], common.wan_rule)
    stats = {"action": {"q01": np.array(spec["action_q01"], np.float32),
                        "q99": np.array(spec["action_q99"], np.float32)}}
    pre, post = make_lingbot_va_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(checkpoint)
    return policy, pre, post, pieces, lines


# ---------------------------------------------------------------------------------------- running a case
class PreparedNoise:
    """Stands for `torch` inside LeRobot's modeling_lingbot_va during a case: randn hands out the
    prepared tensors in order (checking shape and dtype); everything else is torch's own."""

    def __init__(self, tensors):
        self.left, self.served = list(tensors), []

    def __getattr__(self, name):
        return getattr(torch, name)

    def randn(self, *size, device=None, dtype=None, **kwargs):
        tensor = self.left.pop(0)
        assert tuple(size) == tuple(tensor.shape) and dtype == tensor.dtype and not kwargs, (size, tensor.shape)
        self.served.append(tensor.clone())
        return tensor.clone().to(device)


def cache_state(attention):
    caches = attention.attn_caches or {}
    cache = caches.get("pos")
    return None if cache is None else (cache["mask"].clone(), cache["id"].clone())


class CallLog:
    """Every transformer call of a case, with the KV-cache entries block 0's self-attention keeps,
    evicts and writes during it (every block shares block 0's layout). Entries are named by what wrote
    them: pred<chunk>.<stream> (the last denoising step) or obs<chunk-1>.<stream> (fed-back keyframes)."""

    def __init__(self, transformer):
        self.calls, self.names, self.chunk, self.phase = [], {}, -1, None
        self.before = self.attention = self.block0 = self.text = self.temb = None
        attention = transformer.blocks[0].attn1
        self.hooks = [
            transformer.register_forward_hook(self.on_call, with_kwargs=True),
            transformer.blocks[0].register_forward_hook(lambda m, a, o: setattr(self, "block0", common.keep(o))),
            transformer.condition_embedder.text_embedder.register_forward_hook(
                lambda m, a, o: setattr(self, "text", common.keep(o))),
            transformer.condition_embedder.register_forward_hook(lambda m, a, o: setattr(self, "temb", common.keep(o[1]))),
            transformer.condition_embedder_action.register_forward_hook(
                lambda m, a, o: setattr(self, "temb", common.keep(o[1]))),
            attention.register_forward_pre_hook(lambda m, a, k: setattr(self, "before", cache_state(m)),
                                                with_kwargs=True),
            attention.register_forward_hook(self.on_attention, with_kwargs=True)]

    def remove(self):
        for hook in self.hooks:
            hook.remove()

    def label(self, selected, ids):
        return [self.names.get(i, f"id{i}") for i in sorted(set(ids[selected].tolist()))]

    def on_attention(self, module, args, kwargs, output):
        own, mode, after = args[0].shape[1], kwargs["update_cache"], cache_state(module)
        if after is None:
            self.attention = {"keys": own, "attends_cache": [], "evicts": [], "written": None}
            return
        (mask0, id0), (mask1, id1) = self.before, after
        evicted = mask0 & (~mask1 | (id1 != id0))
        kept = mask0 & ~evicted
        written = None
        if mode in (1, 2):
            new = mask1 & (~mask0 | (id1 != id0))
            ids = set(id1[new].tolist())
            assert len(ids) == 1 and int(new.sum()) == own
            written = ids.pop()
        self.attention = {"keys": int(kept.sum()) + own, "attends_cache": self.label(kept, id0),
                          "evicts": self.label(evicted, id0), "written": written}

    def on_call(self, module, args, kwargs, output):
        inputs, mode = args[0], kwargs.get("update_cache", 0)
        stream = "action" if kwargs.get("action_mode", False) else "video"
        step = sum(1 for c in self.calls if (c["chunk"], c["phase"], c["stream"]) == (self.chunk, self.phase, stream))
        attention = dict(self.attention)
        written, writes = attention.pop("written"), None
        if written is not None:
            writes = f"pred{self.chunk}.{stream}" if mode == 1 else f"obs{self.chunk - 1}.{stream}"
            self.names[written] = writes
        self.calls.append({"chunk": self.chunk, "phase": self.phase, "stream": stream, "step": step,
                           "update_cache": mode, "batch": int(inputs["noisy_latents"].shape[0]),
                           "timesteps": common.keep(inputs["timesteps"][0]), "grid": common.keep(inputs["grid_id"][0]),
                           "writes": writes, "x": common.keep(inputs["noisy_latents"]), "out": common.keep(output),
                           "block0": self.block0, "text": self.text, "temb": self.temb, **attention})

    def find(self, chunk, phase, stream, step=None):
        return [c for c in self.calls if (c["chunk"], c["phase"], c["stream"]) == (chunk, phase, stream)
                and (step is None or c["step"] == step)]


def run_case(policy, pre, post, frames: dict, task: str, noises, guidance: float, action_guidance: float,
             log: bool = True) -> dict:
    """LeRobot's predict_action once per environment step, everything observed."""
    import lerobot.policies.lingbot_va.modeling_lingbot_va as modeling
    from lerobot.common.control_utils import predict_action

    config = policy.config
    config.guidance_scale, config.action_guidance_scale = guidance, action_guidance
    policy.reset()  # re-reads the guidance scales (classifier-free guidance on or off, cache batch)
    noise = PreparedNoise(noises)
    calls = CallLog(policy.transformer) if log else None
    seen = {"chunks": [], "encoded": [], "vae": [], "text_in": [], "selected": [], "step_of": {}}
    first_camera = config.obs_cam_keys[0]
    originals = {name: getattr(policy, name) for name in ("predict_action_chunk", "_infer", "_encode_frames",
                                                           "select_action")}

    def predict_action_chunk(batch, **kwargs):
        if calls is not None:
            calls.chunk, calls.phase = calls.chunk + 1, "feedback"
        return originals["predict_action_chunk"](batch, **kwargs)

    def infer(init_latent, frame_st_id=0):
        if calls is not None:
            calls.phase = "denoise"
        actions, latents = originals["_infer"](init_latent, frame_st_id=frame_st_id)
        seen["chunks"].append({"actions": common.keep(actions), "latents": common.keep(latents),
                               "frame_st_id": int(frame_st_id)})
        return actions, latents

    def encode_frames(raw):
        latent = originals["_encode_frames"](raw)
        seen["encoded"].append({"latent": common.keep(latent),
                                "steps": [seen["step_of"][f[first_camera].data_ptr()] for f in raw]})
        return latent

    def select_action(batch, **kwargs):
        seen["step_of"][batch[first_camera].data_ptr()] = len(seen["selected"])
        action = originals["select_action"](batch, **kwargs)
        seen["selected"].append(common.keep(action))
        return action

    for name, wrapper in (("predict_action_chunk", predict_action_chunk), ("_infer", infer),
                          ("_encode_frames", encode_frames), ("select_action", select_action)):
        setattr(policy, name, wrapper)
    modeling.torch = noise
    hooks = []
    try:
        policy._ensure_frozen_modules()  # loads vae/, text_encoder/, tokenizer/ from wan_pretrained_path
        encoder, streaming = policy._frozen["text_encoder"], policy._frozen["streaming_vae"]
        hooks.append(encoder.register_forward_pre_hook(lambda m, a: seen["text_in"].append(common.keep(a[:2]))))
        encode_chunk = streaming.encode_chunk

        def recorded_encode_chunk(x):
            moments = encode_chunk(x)
            seen["vae"].append((None if seen["vae"] else common.keep(x), common.keep(moments)))
            return moments

        streaming.encode_chunk = recorded_encode_chunk
        finals = []
        for t in range(frames[first_camera].shape[0]):
            observation = {camera: frames[camera][t].copy() for camera in config.obs_cam_keys}
            finals.append(predict_action(observation, policy, CPU, pre, post, use_amp=False, task=task, robot_type=""))
    finally:
        modeling.torch = torch
        for name in originals:
            delattr(policy, name)
        if policy._frozen:
            policy._frozen["streaming_vae"].__dict__.pop("encode_chunk", None)
        for hook in hooks:
            hook.remove()
        if calls is not None:
            calls.remove()
    assert not noise.left, "a prepared noise was not used"
    seen.update(finals=torch.cat(finals), served=noise.served, calls=calls, use_cfg=bool(policy._use_cfg),
                prompt_embeds=common.keep(policy._prompt_embeds),
                negative_prompt_embeds=common.keep(policy._negative_prompt_embeds))
    return seen


def latent_hw(config) -> tuple[int, int]:
    return config.height // 16, (config.width // 16) * len(config.obs_cam_keys)


def case_arrays(k: int, config, frames: dict, seen: dict, taps: bool) -> dict:
    """cases.npz arrays of one case (batch dimension dropped unless stated)."""
    from lerobot.policies.lingbot_va.utils import data_seq_to_patch

    p, F, per_frame, actions = f"case{k}_", config.frame_chunk_size, config.action_per_frame, config.action_dim
    lh, lw = latent_hw(config)
    calls, out = seen["calls"], {}
    for camera in config.obs_cam_keys:
        out[f"{p}images_{camera.rsplit('.', 1)[-1]}"] = frames[camera]
    ids, mask = seen["text_in"][0]
    out[f"{p}token_ids"], out[f"{p}token_mask"] = ids[0].numpy(), mask[0].numpy()
    out[f"{p}prompt_embeds"] = seen["prompt_embeds"][0].numpy()
    if seen["use_cfg"]:
        ids, mask = seen["text_in"][1]
        out[f"{p}negative_token_ids"], out[f"{p}negative_token_mask"] = ids[0].numpy(), mask[0].numpy()
        out[f"{p}negative_prompt_embeds"] = seen["negative_prompt_embeds"][0].numpy()
    clip, moments = seen["vae"][0]
    out[f"{p}init_frames"] = clip[:, :, 0].numpy()  # (cameras, 3, H, W) in [-1, 1]: the VAE's first input
    out[f"{p}init_vae_moments"] = moments[:, :, 0].numpy()  # encoder + quant_conv output
    out[f"{p}init_latent"] = seen["encoded"][0]["latent"][0].numpy()
    for j, chunk in enumerate(seen["chunks"]):
        q = f"{p}chunk{j}_"
        out[q + "noise_latents"] = seen["served"][2 * j][0].numpy()
        out[q + "noise_actions"] = seen["served"][2 * j + 1][0, :, :, :, 0].numpy()
        if j > 0:
            out[q + "obs_latents"] = calls.find(j, "feedback", "video")[0]["x"][0].numpy()
        video, action = calls.find(j, "denoise", "video"), calls.find(j, "denoise", "action")
        out[q + "video_x"] = np.stack([c["x"][0].reshape(Z_DIM, F, lh, lw).numpy() for c in video])
        out[q + "video_v"] = np.stack([data_seq_to_patch(config.patch_size, c["out"], F, lh, lw,
                                                         batch_size=c["batch"]).numpy() for c in video[:-1]])
        out[q + "action_x"] = np.stack([c["x"][0].reshape(actions, F, per_frame).numpy() for c in action])
        out[q + "action_v"] = np.stack([c["out"].reshape(c["batch"], F, per_frame, actions).permute(0, 3, 1, 2)
                                        .numpy() for c in action[:-1]])
        out[q + "pred_latents"] = chunk["latents"][0].numpy()
        out[q + "actions_full"] = chunk["actions"][0, :, :, :, 0].numpy()
    out[f"{p}step_actions_model"] = torch.cat(seen["selected"]).numpy()
    out[f"{p}step_actions"] = seen["finals"].numpy()
    if taps:
        def first(j, stream):
            return calls.find(j, "denoise", stream, 0)[0]
        out[f"{p}tap_text_hidden"] = first(0, "video")["text"].numpy()
        out[f"{p}tap_video_timestep_proj_c0s0"] = first(0, "video")["temb"].numpy()
        out[f"{p}tap_action_timestep_proj_c1s0"] = first(1, "action")["temb"].numpy()
        last = len(seen["chunks"]) - 1
        for j, stream in ((0, "video"), (0, "action"), (1, "video"), (1, "action"), (last, "video")):
            out[f"{p}tap_block0_{stream}_c{j}s0"] = first(j, stream)["block0"].numpy()
        out[f"{p}tap_grid_video_c1"] = first(1, "video")["grid"].numpy()
        out[f"{p}tap_grid_action_c1"] = first(1, "action")["grid"].numpy()
    return out


def case_log(config, seen: dict) -> tuple[list, list]:
    """The chunks (frames, executed steps, fed-back keyframes) and every transformer call, as JSON."""
    chunks, start = [], 0
    for j, chunk in enumerate(seen["chunks"]):
        n = (config.frame_chunk_size - (1 if j == 0 else 0)) * config.action_per_frame
        st = chunk["frame_st_id"]
        chunks.append({"index": j, "frame_st_id": st,
                       "latent_frame_positions": list(range(st, st + config.frame_chunk_size)),
                       "executed_at_steps": [start, start + n - 1],
                       "fed_back_keyframe_steps": None if j == 0 else seen["encoded"][j]["steps"]})
        start += n
    calls = [{"chunk": c["chunk"], "phase": c["phase"], "stream": c["stream"], "step": c["step"],
              "update_cache": c["update_cache"], "batch": c["batch"],
              "timesteps_per_frame": [round(float(x), 6) for x in c["timesteps"].tolist()],
              "frame_positions": sorted({round(float(x), 6) for x in c["grid"][0].tolist()}),
              "tokens": int(c["grid"].shape[1]), "keys": c["keys"], "attends_cache": c["attends_cache"],
              "evicts": c["evicts"], "writes": c["writes"]} for c in seen["calls"].calls]
    return chunks, calls


def schedules(config) -> dict:
    from lerobot.policies.lingbot_va.utils import FlowMatchScheduler

    out = {}
    for stream, shift, steps in (("video", config.snr_shift, config.num_inference_steps),
                                 ("action", config.action_snr_shift, config.action_num_inference_steps)):
        scheduler = FlowMatchScheduler(shift=shift, sigma_min=0.0, extra_one_step=True)
        scheduler.set_timesteps(steps)
        out[f"sched_{stream}_sigmas"] = scheduler.sigmas.numpy()
        out[f"sched_{stream}_timesteps"] = torch.nn.functional.pad(scheduler.timesteps, (0, 1), value=0).numpy()
    return out


def camera_frames(hw, steps: int, rng: np.random.Generator) -> np.ndarray:
    """`steps` uint8 HWC frames: a coarse random texture drifting by a few pixels a step, plus noise."""
    h, w = hw
    texture = np.repeat(np.repeat(rng.integers(0, 256, (h // 8 + 4, w // 8 + 4, 3)), 8, 0), 8, 1).astype(np.float64)
    frames = []
    for t in range(steps):
        dy, dx = (3 * t) % 24, (5 * t) % 24
        frame = texture[dy:dy + h, dx:dx + w] + rng.normal(0.0, 12.0, (h, w, 3))
        frames.append(np.clip(np.rint(frame), 0, 255).astype(np.uint8))
    return np.stack(frames)


def case_inputs(spec: dict, config, k: int, case: dict):
    """Per case k: frames from numpy default_rng(seeds.data + k), one per step and camera; noises from
    torch.Generator(seeds.noise + k), per chunk the video noise, then the action noise."""
    steps = (config.frame_chunk_size - 1) * config.action_per_frame + (case["n_chunks"] - 1) * config.chunk_size
    rng = np.random.default_rng(spec["seeds"]["data"] + k)
    frames = {camera: camera_frames(spec["cameras"][camera], steps, rng) for camera in config.obs_cam_keys}
    generator = common.rng(spec["seeds"]["noise"] + k)
    noises = []
    for _ in range(case["n_chunks"]):
        noises.append(torch.randn(1, Z_DIM, config.frame_chunk_size, *latent_hw(config), generator=generator))
        noises.append(torch.randn(1, config.action_dim, config.frame_chunk_size, config.action_per_frame, 1,
                                  generator=generator))
    return frames, noises


# ---------------------------------------------------------------------------------------- generate / verify
def generate(spec: dict, out: Path) -> None:
    import lerobot.policies.lingbot_va.modeling_lingbot_va as modeling
    from safetensors.torch import load_file
    from transformers import T5Tokenizer

    checkpoint = out / "checkpoint"
    if checkpoint.is_dir():
        shutil.rmtree(checkpoint)
    policy, pre, post, pieces, lines = build(spec, checkpoint)
    config = policy.config
    os.chdir(checkpoint)  # wan_pretrained_path "." = the frozen modules saved in the checkpoint
    arrays, entries = dict(schedules(config)), []
    for k, case in enumerate(spec["cases"]):
        frames, noises = case_inputs(spec, config, k, case)
        gs, ags = case["guidance_scale"], case["action_guidance_scale"]
        seen = run_case(policy, pre, post, frames, case["task"], noises, gs, ags)
        again = run_case(policy, pre, post, frames, case["task"], noises, gs, ags, log=False)
        assert torch.equal(seen["finals"], again["finals"]), "not repeatable"
        assert all(torch.equal(a["actions"], b["actions"]) and torch.equal(a["latents"], b["latents"])
                   for a, b in zip(seen["chunks"], again["chunks"])), "not repeatable"
        assert len(seen["chunks"]) == case["n_chunks"] and all(torch.equal(a, b) for a, b in zip(seen["served"], noises))
        found = case_arrays(k, config, frames, seen, taps=(k == 0))
        arrays.update(found)
        chunks, calls = case_log(config, seen)
        cleaned = modeling.clean_prompt(case["task"])
        encoded = pieces.encode(cleaned) + [1]
        valid = int(found[f"case{k}_token_mask"].sum())
        assert found[f"case{k}_token_ids"][:valid].tolist() == encoded[:config.max_sequence_length - 1][:valid - 1] + [1]
        entries.append({"index": k, "task": case["task"], "prompt_cleaned": cleaned,
                        "n_tokens_untruncated": len(encoded), "n_valid_tokens": valid,
                        "truncated": len(encoded) > config.max_sequence_length, "guidance_scale": gs,
                        "action_guidance_scale": ags, "cfg_batch": 2 if seen["use_cfg"] else 1,
                        "n_chunks": case["n_chunks"], "n_steps": len(seen["selected"]), "chunks": chunks,
                        "max_abs_action_model": float(np.abs(found[f"case{k}_step_actions_model"]).max()),
                        "deterministic_two_runs": True, "transformer_calls": calls})
        print(f"case{k}: {len(seen['selected'])} steps, {case['n_chunks']} chunks, {len(calls)} transformer calls, "
              f"{valid} tokens, max|a_model| {entries[-1]['max_abs_action_model']:.3f}", flush=True)
    os.chdir(out)
    np.savez(out / "cases.npz", **arrays)

    from_files = T5Tokenizer.from_pretrained(str(checkpoint / "tokenizer"))
    probe = lines + [modeling.clean_prompt(c["task"]) for c in spec["cases"]]
    agree = sum(from_files(s)["input_ids"] == pieces.encode(s) + [1] for s in probe)
    assert agree == len(probe), f"tokenizer files disagree with SentencePiece on {len(probe) - agree} strings"

    def parameters(path):
        return int(sum(t.numel() for t in load_file(str(path)).values()))

    t, u = spec["transformer"], spec["umt5"]
    lh, lw = latent_hw(config)
    patch, hd = config.patch_size, t["attention_head_dim"]
    vae_file = json.loads((checkpoint / "vae" / "config.json").read_text())
    common.write_json(out / "cases.json", {
        "set": spec["name"],
        "what": "LingBot-VA (lerobot LingBotVAPolicy) tiny random-weight checkpoint with its frozen modules bundled, "
                "plus multi-chunk closed-loop inference cases through lerobot's predict_action",
        "checkpoint_dir": "checkpoint",
        "transformer": {**t, "dim": t["num_attention_heads"] * hd, "in_channels": Z_DIM, "out_channels": Z_DIM,
                        "patch_size": list(patch), "rope_split_f_h_w": [hd - 2 * (hd // 3), hd // 3, hd // 3],
                        "n_params": parameters(checkpoint / "model.safetensors")},
        "vae": {**{key: value for key, value in vae_file.items()
                   if key not in ("latents_mean", "latents_std", "_class_name", "_diffusers_version")},
                "n_params": parameters(checkpoint / "vae" / "diffusion_pytorch_model.safetensors")},
        "text_encoder": {**u, "d_model": t["text_dim"], "feed_forward_proj": "gated-gelu",
                         "n_params": parameters(checkpoint / "text_encoder" / "model.safetensors")},
        "tokenizer": {"class": type(from_files).__name__, "pieces": pieces.get_piece_size(), "extra_ids": 0,
                      "special_ids": {"pad": 0, "eos": 1, "unk": 2},
                      "files": sorted(os.listdir(checkpoint / "tokenizer")), "training_lines": len(lines),
                      "sentencepiece_trainer": TRAINER,
                      "hf_equals_sentencepiece_plus_eos_on": f"{agree}/{len(probe)} strings"},
        "cameras_config_order": list(config.obs_cam_keys), "raw_camera_hw": spec["cameras"],
        "model_image_hw": [config.height, config.width], "latent_grid_per_frame": [lh, lw],
        "video_tokens_per_frame": (lh // patch[1]) * (lw // patch[2]),
        "frame_chunk_size": config.frame_chunk_size, "action_per_frame": config.action_per_frame,
        "chunk_size": config.chunk_size, "keyframe_stride": max(1, config.action_per_frame // 4),
        "attn_window": config.attn_window,
        "kv_cache_slots": (config.attn_window // 2) * ((config.frame_chunk_size * lh * lw)
                                                       // (patch[0] * patch[1] * patch[2]) + config.chunk_size),
        "num_inference_steps": config.num_inference_steps,
        "action_num_inference_steps": config.action_num_inference_steps, "snr_shift": config.snr_shift,
        "action_snr_shift": config.action_snr_shift, "max_sequence_length": config.max_sequence_length,
        "action_dim": config.action_dim, "used_action_channel_ids": list(config.used_action_channel_ids),
        "action_names": spec["action_names"], "action_q01": spec["action_q01"], "action_q99": spec["action_q99"],
        "weight_init": {
            "transformer": "torch.Generator(seeds.transformer), named_parameters() order: *scale_shift_table "
                           "0.3*randn; attention norm_q / norm_k and norm2 weights 1 + 0.2*randn; other vectors "
                           "0.1*randn; matrices randn * in_features**-0.5",
            "vae": "torch.Generator(seeds.vae): RMS-norm gammas 1 + 0.1*randn; vectors (biases) 0.1*randn; "
                   "convolution weights randn * (in_channels*kernel_volume)**-0.5; latents_mean 0.3*N(0,1) and "
                   "latents_std 0.6 + 0.8*U(0,1) from numpy default_rng(seeds.vae), rounded to 4 decimals",
            "text_encoder": "torch.Generator(seeds.text_encoder): layer-norm weights 1 + 0.1*randn; "
                            "relative_attention_bias 0.5*randn; shared embedding randn; SelfAttention.q "
                            "randn * (d_model*d_kv)**-0.5; other matrices randn * in_features**-0.5"},
        "inputs": "per case k: frames from numpy default_rng(seeds.data + k) (a coarse random texture drifting a "
                  "few pixels per step, plus noise; uint8 HWC, one per environment step and camera); noises from "
                  "torch.Generator(seeds.noise + k), per chunk the video noise (1,48,F,lh,lw) then the action "
                  "noise (1,action_dim,F,apf,1)",
        "seeds": spec["seeds"], "cases": entries,
        "generated_by": common.generated_by("reference/gen_lingbot_va.py", "lerobot", "torch", "transformers",
                                            "diffusers", "tokenizers", "sentencepiece", "safetensors", "numpy",
                                            torch_num_threads=torch.get_num_threads())})


def verify(out: Path) -> dict:
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.lingbot_va import LingBotVAPolicy

    checkpoint = out / "checkpoint"
    info = json.loads((out / "cases.json").read_text())
    with np.load(out / "cases.npz") as z:
        recorded = {name: z[name] for name in z.files}
    os.chdir(checkpoint)  # the saved wan_pretrained_path is "."
    policy = LingBotVAPolicy.from_pretrained(checkpoint)
    pre, post = make_pre_post_processors(policy.config, pretrained_path=checkpoint)
    config = policy.config
    report = {"policy_class": type(policy).__name__, "wan_pretrained_path": config.wan_pretrained_path, "cases": []}
    wrong = []
    for case in info["cases"]:
        k = case["index"]
        frames = {c: recorded[f"case{k}_images_{c.rsplit('.', 1)[-1]}"] for c in config.obs_cam_keys}
        noises = []
        for j in range(case["n_chunks"]):
            noises.append(torch.from_numpy(recorded[f"case{k}_chunk{j}_noise_latents"])[None])
            noises.append(torch.from_numpy(recorded[f"case{k}_chunk{j}_noise_actions"])[None, :, :, :, None])
        seen = run_case(policy, pre, post, frames, case["task"], noises, case["guidance_scale"],
                        case["action_guidance_scale"])
        found = case_arrays(k, config, frames, seen, taps=(k == 0))
        names = sorted(x for x in recorded if x.startswith(f"case{k}_"))
        bad = [x for x in names if x not in found or found[x].dtype != recorded[x].dtype
               or not np.array_equal(found[x], recorded[x])] + [x for x in found if x not in recorded]
        wrong += bad
        report["cases"].append({"index": k, "arrays_compared": len(names), "mismatches": bad,
                                "call_log_equal": case_log(config, seen)[1] == case["transformer_calls"]})
    tables = schedules(config)
    report["schedules_equal"] = all(np.array_equal(tables[x], recorded[x]) for x in tables)
    report["all_bit_exact"] = bool(not wrong and report["schedules_equal"]
                                   and all(c["call_log_equal"] for c in report["cases"]))
    return report


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--verify":
        common.threads(DEFAULTS["torch_threads"])
        report = verify(Path(sys.argv[2]).resolve())
        print("VERIFY " + json.dumps(report))
        sys.exit(0 if report["all_bit_exact"] else 1)
    spec, out, _ = common.command_line(DEFAULTS, __doc__, whole=("cameras",))
    common.threads(spec["torch_threads"])
    out.mkdir(parents=True, exist_ok=True)
    generate(spec, out)
    finished = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--verify", str(out)],
                              capture_output=True, text=True)
    line = [x for x in finished.stdout.splitlines() if x.startswith("VERIFY ")]
    if finished.returncode != 0 or not line:
        print(finished.stdout[-3000:], finished.stderr[-3000:])
        sys.exit("verification in a fresh process FAILED")
    info = json.loads((out / "cases.json").read_text())
    info["verification"] = {"how": "fresh process, working directory = checkpoint/: LingBotVAPolicy.from_pretrained("
                                   "checkpoint) + lerobot.policies.factory.make_pre_post_processors(config, "
                                   "pretrained_path=checkpoint); frozen modules loaded lazily from wan_pretrained_path "
                                   "'.'; the same frames, tasks and recorded noises; every cases.npz array recomputed",
                            **json.loads(line[-1][len("VERIFY "):])}
    common.write_json(out / "cases.json", info)
    common.readable(out)
    print(f"wrote {out}; fresh-process check: all bit-exact = {info['verification']['all_bit_exact']}")


if __name__ == "__main__":
    main()
