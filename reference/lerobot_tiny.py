"""Tiny LeRobot policies for the reference generators: LeRobot builds pi0 / pi0.5 at the released
Gemma sizes and SmolVLA from a hub VLM, so these helpers make the same classes small and offline.

pi0 / pi0.5: LeRobot picks the LM and expert sizes from a table (`get_gemma_config("gemma_2b" /
"gemma_300m")`) and fixes the SigLIP sizes inside `PaliGemmaWithExpertModel`; `shrink_paligemma`
swaps, inside the policy's modeling module, that table for the spec's sizes and the two
constructors for wrappers that set the spec's vision sizes and vocabulary first. Nothing else of
LeRobot changes.

SmolVLA: LeRobot asks the hub for "HuggingFaceTB/SmolVLM2-500M-Video-Instruct" (AutoConfig and
AutoProcessor) even without its weights; `smolvla_offline` answers both inside LeRobot's
`smolvlm_with_expert` module with a tiny `SmolVLMConfig` and an object whose tokenizer carries the
image-marker ids the policy reads when it is built.
"""

from __future__ import annotations

import types

import numpy as np
import torch

import common

GEMMA_KEYS = ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim")
SMOLVLM_NAME = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
MASK_VALUE = -2.3819763e38  # what LeRobot's pi0 / pi0.5 add to masked attention scores


# ---------------------------------------------------------------------------------------- pi0 / pi0.5
def shrink_paligemma(modeling, vision: dict, lm: dict, expert: dict, vocab_size: int, patch_size: int) -> None:
    """Makes `modeling` (lerobot.policies.pi0.modeling_pi0 or pi05.modeling_pi05) build the given sizes."""
    sizes = {"gemma_2b": lm, "gemma_300m": expert}
    modeling.get_gemma_config = lambda variant: modeling.GemmaConfig(**{k: sizes[variant][k] for k in GEMMA_KEYS})
    build_paligemma, build_expert = (modeling.PaliGemmaForConditionalGenerationWithPiGemma,
                                     modeling.PiGemmaForCausalLM)

    def paligemma(config):
        tower = config.vision_config
        tower.hidden_size, tower.intermediate_size = vision["width"], vision["mlp_dim"]
        tower.num_hidden_layers, tower.num_attention_heads = vision["depth"], vision["num_heads"]
        tower.patch_size = patch_size
        tower.projection_dim = config.text_config.hidden_size
        config.text_config.vocab_size = vocab_size
        return build_paligemma(config=config)

    def gemma_expert(config):
        config.vocab_size = vocab_size
        return build_expert(config=config)

    modeling.PaliGemmaForConditionalGenerationWithPiGemma = paligemma
    modeling.PiGemmaForCausalLM = gemma_expert


def check_pi_sizes(spec: dict) -> None:
    lm, expert = spec["lm"], spec["expert"]
    assert spec["image_size"] % spec["patch_size"] == 0
    for key in ("num_heads", "num_kv_heads", "head_dim"):  # the expert attends over the LM's keys and values
        assert lm[key] == expert[key], f"LM and expert {key} differ"
    assert lm["num_heads"] == 8, "LeRobot 0.6.1 hard-codes 8 heads (compute_layer_complete)"


def camera_names(n: int) -> list[str]:
    return [f"observation.images.cam{i}" for i in range(n)]


def build_pi(family: str, spec: dict, cameras: dict | None = None, **config_changes):
    """A tiny PI05Policy ("pi05") or PI0Policy ("pi0"), float32 on the CPU, parameters as built
    (the caller redraws them). `cameras` {name: (H, W)} defaults to n_cameras square cameras."""
    if family == "pi05":
        import lerobot.policies.pi05.modeling_pi05 as modeling
        from lerobot.policies.pi05 import PI05Config as Config
        policy_class = "PI05Policy"
    else:
        import lerobot.policies.pi0.modeling_pi0 as modeling
        from lerobot.policies.pi0 import PI0Config as Config
        policy_class = "PI0Policy"
    check_pi_sizes(spec)
    shrink_paligemma(modeling, spec["vision"], spec["lm"], spec["expert"], spec["vocab_size"], spec["patch_size"])
    size = spec["image_size"]
    if cameras is None:
        cameras = {name: (size, size) for name in camera_names(spec["n_cameras"])}
    settings = dict(device="cpu", dtype="float32", image_resolution=(size, size), chunk_size=spec["chunk_size"],
                    n_action_steps=spec["chunk_size"], tokenizer_max_length=spec["tokenizer_max_length"],
                    max_action_dim=spec["max_action_dim"], max_state_dim=spec["max_state_dim"],
                    num_inference_steps=spec["num_inference_steps"],
                    **common.policy_features(cameras, spec["state_dim"], spec["action_dim"]))
    settings.update(config_changes)
    common.seed_global(spec["seeds"]["torch_manual_seed"])
    return getattr(modeling, policy_class)(Config(**settings)).eval(), modeling


def draw_pi_case(generator: torch.Generator, spec: dict, case: dict, cameras: list[str], *, state: bool,
                 token_high: int | None = None) -> dict:
    """One observation of a model-level record, drawn in this order from `generator`: images
    rand(n_cameras, 3, H, W) in [0, 1], prompt ids randint(0, token_high or vocab, (1, L)) zeroed after
    the valid ones, the state randn(1, state_dim) * state_scale (pi0 / SmolVLA only), the noise
    randn(1, chunk, max_action_dim). A missing camera is left out of the batch; LeRobot puts the
    present cameras first and fills the rest with padding images, and the record stores the images in
    that (model) order with zeros for padding."""
    n, size, length = len(cameras), spec["image_size"], spec["tokenizer_max_length"]
    images = torch.rand(n, 3, size, size, generator=generator)
    tokens = torch.randint(0, token_high or spec["vocab_size"], (1, length), generator=generator)
    tokens[:, case["valid_tokens"]:] = 0
    token_mask = torch.arange(length)[None] < case["valid_tokens"]
    drawn_state = None
    if state:
        drawn_state = torch.randn(1, spec["state_dim"], generator=generator) * case.get("state_scale", 1.0)
    noise = torch.randn(1, spec["chunk_size"], spec["max_action_dim"], generator=generator)
    missing = sorted(case.get("missing_cameras", []))
    present = [i for i in range(n) if i not in missing]
    batch = {cameras[i]: images[i:i + 1].clone() for i in present}
    batch["observation.language.tokens"] = tokens
    batch["observation.language.attention_mask"] = token_mask
    if drawn_state is not None:
        batch["observation.state"] = drawn_state.clone()
    return {"case": case, "batch": batch, "images": images, "tokens": tokens, "token_mask": token_mask,
            "state": drawn_state, "noise": noise, "present": present, "missing": missing}


def pi_record_arrays(observations: list, actions: list, embeddings, taps: dict, depth: int,
                     state: bool) -> dict[str, np.ndarray]:
    """A pi0 / pi0.5 model-level record's arrays: each case's inputs and actions, case 0's taps
    (the image embeddings, the prefix's last hidden state, pad mask and first/last layer K/V, the
    first solver step's velocity). `state`: the model reads the state (pi0)."""
    arrays = {}
    for k, obs in enumerate(observations):
        _, images, masks = pi_model_order(obs)
        arrays[f"case{k}_images"] = images.numpy()
        arrays[f"case{k}_image_masks"] = masks
        arrays[f"case{k}_tokens"] = obs["tokens"][0].numpy().astype(np.int64)
        arrays[f"case{k}_token_mask"] = obs["token_mask"][0].numpy()
        if state:
            arrays[f"case{k}_state"] = obs["state"][0].numpy()
        arrays[f"case{k}_noise"] = obs["noise"][0].numpy()
        arrays[f"case{k}_actions"] = actions[k].numpy()
    arrays["case0_image_embeddings"] = embeddings.numpy()
    arrays["case0_prefix_hidden"] = taps["prefix_hidden"][0].numpy()
    arrays["case0_prefix_pad_mask"] = taps["pad_mask"][0].numpy()
    for label, layer in (("layer0", 0), ("layerLAST", depth - 1)):
        arrays[f"case0_prefix_k_{label}"] = taps["cache"][layer][0].numpy()
        arrays[f"case0_prefix_v_{label}"] = taps["cache"][layer][1].numpy()
    arrays["case0_velocity_step0"] = taps["velocity"][0].numpy()
    return arrays


def pi_model_order(obs: dict) -> tuple[list[int], torch.Tensor, np.ndarray]:
    """The cameras in the order LeRobot's pi0 / pi0.5 feed them (present first), their images with
    zeros for a missing camera, and the masks."""
    order = obs["present"] + obs["missing"]
    images = torch.stack([obs["images"][i] if i in obs["present"] else torch.zeros_like(obs["images"][i])
                          for i in order])
    return order, images, np.array([i in obs["present"] for i in order])


def gemma_dims(config, token_embedding: bool, **more) -> dict:
    dims = {"width": config.hidden_size, "depth": config.num_hidden_layers, "mlp_dim": config.intermediate_size,
            "num_heads": config.num_attention_heads, "num_kv_heads": config.num_key_value_heads,
            "head_dim": config.head_dim, "vocab_size": config.vocab_size, "rms_norm_eps": config.rms_norm_eps,
            "rope_theta": config.rope_parameters["rope_theta"], "hidden_act": config.hidden_activation,
            "attention_bias": config.attention_bias}
    dims.update(more)
    if token_embedding:
        dims["embed_scale"] = "sqrt(width), applied to the token embedding lookup"
    return dims


def pi_config_head(spec: dict, policy, cameras: list[str], model: str, *, vision_extra: dict | None = None) -> dict:
    """The config.json fields every pi0 / pi0.5 record shares, from the built model's own configs."""
    joint = policy.model.paligemma_with_expert
    tower, text = joint.paligemma.config.vision_config, joint.paligemma.config.text_config
    tokens_per_camera = (spec["image_size"] // spec["patch_size"]) ** 2
    vision = {"image_size": tower.image_size, "patch_size": tower.patch_size, "tokens_per_camera": tokens_per_camera,
              "width": tower.hidden_size, "depth": tower.num_hidden_layers, "mlp_dim": tower.intermediate_size,
              "num_heads": tower.num_attention_heads, "head_dim": tower.hidden_size // tower.num_attention_heads,
              "layer_norm_eps": tower.layer_norm_eps, "hidden_act": tower.hidden_act, "pooling_head": False}
    vision.update(vision_extra or {})
    return {"set": spec["name"], "model": model, "camera_names": cameras, "n_cameras": len(cameras),
            "vision": vision,
            "projector": {"in_dim": tower.hidden_size, "out_dim": text.hidden_size, "bias": True, "activation": None}}


def pi_sizes(spec: dict) -> dict:
    return {"chunk_size": spec["chunk_size"], "max_action_dim": spec["max_action_dim"],
            "max_state_dim": spec["max_state_dim"], "action_dim": spec["action_dim"], "state_dim": spec["state_dim"],
            "num_inference_steps": spec["num_inference_steps"]}


PI_WEIGHT_INIT = ("every parameter p <- randn * (p.shape[-1]**-0.5 if p.ndim > 1 else 0.1), torch.Generator seeded "
                  "with seed.weights, in policy.named_parameters() order")


# ---------------------------------------------------------------------------------------- SmolVLA
def smolvla_marker_ids(vocab_size: int) -> dict:
    """Stand-in ids of SmolVLM's image-marker tokens: the top three of the vocabulary."""
    return {"fake_image_token_id": vocab_size - 3, "global_image_token_id": vocab_size - 2,
            "image_token_id": vocab_size - 1}


def smolvla_offline(spec: dict) -> None:
    """Answers LeRobot's two hub look-ups of SmolVLA's VLM with a tiny config from the spec."""
    from transformers import LlamaConfig, SmolVLMConfig
    from transformers.models.smolvlm.configuration_smolvlm import SmolVLMVisionConfig

    import lerobot.policies.smolvla.smolvlm_with_expert as with_expert

    vision, text, markers = spec["vision"], spec["text"], smolvla_marker_ids(spec["vocab_size"])

    def vlm_config():
        tower = SmolVLMVisionConfig(hidden_size=vision["width"], intermediate_size=vision["mlp_dim"],
                                    num_hidden_layers=vision["depth"], num_attention_heads=vision["num_heads"],
                                    image_size=spec["image_size"], patch_size=vision["patch_size"],
                                    hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
        language = LlamaConfig(vocab_size=spec["vocab_size"], hidden_size=text["width"],
                               intermediate_size=text["mlp_dim"], num_hidden_layers=text["depth"],
                               num_attention_heads=text["num_heads"], num_key_value_heads=text["num_kv_heads"],
                               head_dim=text["head_dim"], hidden_act="silu", rms_norm_eps=text["rms_norm_eps"],
                               attention_bias=False, mlp_bias=False,
                               rope_parameters={"rope_type": "default", "rope_theta": text["rope_theta"]},
                               max_position_embeddings=8192, pad_token_id=0, tie_word_embeddings=False)
        return SmolVLMConfig(vision_config=tower, text_config=language, scale_factor=spec["scale_factor"],
                             image_token_id=markers["image_token_id"], pad_token_id=0, tie_word_embeddings=False)

    def answering(make):
        def from_pretrained(name, *args, **kwargs):
            if name != SMOLVLM_NAME:
                raise OSError(f"offline reference build: nothing stands in for {name}")
            return make()
        return types.SimpleNamespace(from_pretrained=from_pretrained)

    with_expert.AutoConfig = answering(vlm_config)
    with_expert.AutoProcessor = answering(lambda: types.SimpleNamespace(tokenizer=types.SimpleNamespace(**markers)))


def build_smolvla(spec: dict, cameras: dict | None = None, **config_changes):
    """A tiny SmolVLAPolicy (VLM truncated to num_vlm_layers, expert as LeRobot builds it)."""
    import lerobot.policies.smolvla.modeling_smolvla as modeling
    from lerobot.policies.smolvla import SmolVLAConfig

    size = spec["image_size"]
    assert size % (spec["vision"]["patch_size"] * spec["scale_factor"]) == 0
    smolvla_offline(spec)
    if cameras is None:
        cameras = {name: (size, size) for name in camera_names(spec["n_cameras"])}
    settings = dict(device="cpu", chunk_size=spec["chunk_size"], n_action_steps=spec["chunk_size"],
                    max_state_dim=spec["max_state_dim"], max_action_dim=spec["max_action_dim"],
                    resize_imgs_with_padding=(size, size), empty_cameras=spec["empty_cameras"],
                    tokenizer_max_length=spec["tokenizer_max_length"], num_steps=spec["num_steps"],
                    vlm_model_name=SMOLVLM_NAME, load_vlm_weights=False, add_image_special_tokens=False,
                    attention_mode="cross_attn", num_expert_layers=spec["num_expert_layers"],
                    num_vlm_layers=spec["num_vlm_layers"], self_attn_every_n_layers=spec["self_attn_every_n_layers"],
                    expert_width_multiplier=spec["expert_width_multiplier"],
                    **common.policy_features(cameras, spec["state_dim"], spec["action_dim"]))
    settings.update(config_changes)
    common.seed_global(spec["seeds"]["torch_manual_seed"])
    return modeling.SmolVLAPolicy(SmolVLAConfig(**settings)).eval()


def PI05_RULE_HALF(name: str, p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """`common.last_dim_rule`, then rounded to float16 (stored as F16; the reference runs in float32)."""
    return common.last_dim_rule(name, p, r).half().float()
