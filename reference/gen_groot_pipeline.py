#!/usr/bin/env python
"""Make test/data/groot_pipeline_tiny: a tiny GR00T N1.7 in LeRobot's save layout with its whole
processor pipeline (raw camera frames, raw state and task text -> physical actions).

Runs in the PyTorch reference environment (LeRobot 0.6.1, transformers, torch CPU) with a real
torchvision (LeRobot's N1.7 view transform and the Qwen image processor resize on torch tensors;
`real_torchvision.sh DIR` unpacks one):

    PYTHONPATH=DIR python gen_groot_pipeline.py OUT_DIR

Offline stand-ins, as for the model-level record: LeRobot builds N1.7 from the hub
("nvidia/GR00T-N1.7-3B", "nvidia/Cosmos-Reason2-2B"); here the backbone config is a tiny
Qwen3VLConfig and the processor's tokenizer a byte-level BPE trained on a few sentences with the
Qwen special tokens, saved with the Qwen3-VL chat template and image-processor settings
(patch 16, merge 2, mean = std = 0.5, the released pixel bounds). Everything after that is LeRobot:
`make_groot_pre_post_processors` with min/max dataset statistics, `GrootPolicy.predict_action_chunk`,
the postprocessor; pipelines and policy saved with their own `save_pretrained`.
"""
import json
import os
import shutil
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from torch import nn
from transformers import Qwen3VLConfig

import lerobot.policies.groot.groot_n1_7 as gn
import lerobot.policies.groot.modeling_groot as mg
import lerobot.policies.groot.processor_groot as pg
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.policies.groot import GrootConfig
from lerobot.policies.groot.configuration_groot import GROOT_N1_7_BASE_MODEL

torch.set_num_threads(1)
OUT = Path(sys.argv[1])
CHECKPOINT = OUT / "checkpoint"
TOKENIZER_DIR = CHECKPOINT / "tokenizer"
CAMERAS = ("front", "wrist")  # observation.images.<name>; LeRobot feeds the present ones sorted
STATE_DIM, ACTION_DIM, HORIZON, MAX_DIM, STEPS = 6, 5, 8, 16, 4
SEED_WEIGHTS, SEED_DATA, SEED_NOISE = 601, 602, 610

# ---- the tokenizer: byte-level BPE with Qwen's split rule and special tokens ----------------
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]
CORPUS = ["pick up the red cube and place it in the bowl", "open the top drawer", "push the button down",
          "user", "stack the green block on the blue block", "wipe the table with the sponge",
          "Put the cup on the plate!", "move left 10 cm", "fold the towel in half, then put it away"] * 4
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def write_tokenizer(folder: Path) -> dict[str, int]:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "model_max_length": 4096, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "add_bos_token": False, "chat_template": CHAT_TEMPLATE}, indent=1))
    image_settings = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3,
                      "image_std": [0.5] * 3, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                      "do_resize": True, "do_convert_rgb": True,
                      "size": {"shortest_edge": 65536, "longest_edge": 16777216}}
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {**image_settings, "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen3VLProcessor"},
        indent=1))
    (folder / "video_preprocessor_config.json").write_text(json.dumps(
        {**image_settings, "video_processor_type": "Qwen3VLVideoProcessor", "processor_class": "Qwen3VLProcessor"},
        indent=1))
    return {token: tokenizer.token_to_id(token) for token in SPECIALS}


special = write_tokenizer(TOKENIZER_DIR)
VOCAB = 512  # the embedding table is wider than the tokenizer, as Qwen's is

# ---- tiny model in place of the hub download ------------------------------------------------
VISION = dict(width=32, depth=3, mlp_dim=64, num_heads=2, num_position_embeddings=16, deepstack=[0, 2])
TEXT = dict(width=64, depth=4, mlp_dim=128, num_heads=4, num_kv_heads=2, head_dim=16, mrope_section=[4, 2, 2])
SELECT_LAYER = 3


def tiny_qwen3_vl_config():
    return Qwen3VLConfig(
        image_token_id=special["<|image_pad|>"], video_token_id=special["<|video_pad|>"],
        vision_start_token_id=special["<|vision_start|>"], vision_end_token_id=special["<|vision_end|>"],
        tie_word_embeddings=True,
        text_config={"attention_bias": False, "attention_dropout": 0.0, "head_dim": TEXT["head_dim"],
                     "hidden_act": "silu", "hidden_size": TEXT["width"], "intermediate_size": TEXT["mlp_dim"],
                     "max_position_embeddings": 4096, "model_type": "qwen3_vl_text",
                     "num_attention_heads": TEXT["num_heads"], "num_hidden_layers": TEXT["depth"],
                     "num_key_value_heads": TEXT["num_kv_heads"], "rms_norm_eps": 1e-6,
                     "rope_scaling": {"mrope_interleaved": True, "mrope_section": TEXT["mrope_section"],
                                      "rope_type": "default"},
                     "rope_theta": 5000000, "tie_word_embeddings": True, "vocab_size": VOCAB},
        vision_config={"deepstack_visual_indexes": VISION["deepstack"], "depth": VISION["depth"],
                       "hidden_act": "gelu_pytorch_tanh", "hidden_size": VISION["width"], "in_channels": 3,
                       "intermediate_size": VISION["mlp_dim"], "model_type": "qwen3_vl",
                       "num_heads": VISION["num_heads"], "num_position_embeddings": VISION["num_position_embeddings"],
                       "out_hidden_size": TEXT["width"], "patch_size": 16, "spatial_merge_size": 2,
                       "temporal_patch_size": 2})


HEAD = dict(backbone_embedding_dim=TEXT["width"], select_layer=SELECT_LAYER, max_state_dim=MAX_DIM,
            max_action_dim=MAX_DIM, action_horizon=HORIZON, hidden_size=48, input_embedding_dim=32, max_seq_len=32,
            max_num_embodiments=16, num_inference_timesteps=STEPS, attend_text_every_n_blocks=2,
            diffusion_model_cfg={"positional_embeddings": None, "num_layers": 4, "num_attention_heads": 2,
                                 "attention_head_dim": 16, "norm_type": "ada_norm", "dropout": 0.2,
                                 "final_dropout": True, "output_dim": 48, "interleave_self_attention": True},
            vl_self_attention_cfg={"positional_embeddings": None, "num_layers": 2, "num_attention_heads": 2,
                                   "attention_head_dim": TEXT["width"] // 2, "dropout": 0.2, "final_dropout": True})


def tiny_from_pretrained(cls, pretrained_model_name_or_path, **kw):
    name = pretrained_model_name_or_path
    if name != GROOT_N1_7_BASE_MODEL:
        raise OSError(f"offline build: unexpected model {name}")
    model = cls(gn.GR00TN17Config(**HEAD), load_backbone_weights=False)
    model.backbone.set_trainable_parameters(tune_visual=False, tune_llm=False, tune_top_llm_layers=0)
    return model


gn._cosmos_reason2_qwen3_vl_config = tiny_qwen3_vl_config
gn.GR00TN17.from_pretrained = classmethod(tiny_from_pretrained)
pg.GROOT_N1_7_BACKBONE_MODEL = str(TOKENIZER_DIR)  # the processor's tokenizer and image settings

features = {f"observation.images.{name}": PolicyFeature(FeatureType.VISUAL, (3, 256, 256)) for name in CAMERAS}
features["observation.state"] = PolicyFeature(FeatureType.STATE, (STATE_DIM,))
config = GrootConfig(device="cpu", chunk_size=HORIZON, n_action_steps=HORIZON, max_state_dim=MAX_DIM,
                     max_action_dim=MAX_DIM, use_bf16=False, model_params_fp32=True, input_features=features,
                     output_features={"action": PolicyFeature(FeatureType.ACTION, (ACTION_DIM,))})
torch.manual_seed(0)
policy = mg.GrootPolicy(config).eval()
norm_params = {f"{name}.weight" for name, m in policy.named_modules()
               if (isinstance(m, nn.LayerNorm) and m.elementwise_affine) or type(m).__name__.endswith("RMSNorm")}
generator = torch.Generator().manual_seed(SEED_WEIGHTS)
with torch.no_grad():
    for name, p in policy.named_parameters():
        r = torch.randn(p.shape, generator=generator)
        if name.endswith(".W"):
            p.copy_(r * p.shape[1] ** -0.5)
        elif name.endswith(".b") or p.ndim == 1:
            p.copy_(1.0 + 0.1 * r if name in norm_params else 0.1 * r)
        else:
            p.copy_(r * p[0].numel() ** -0.5)

# ---- statistics: one state joint constant (min == max), the others with ranges -------------
data = np.random.default_rng(SEED_DATA)
state_min = data.uniform(-2, 0, STATE_DIM).astype(np.float32)
state_max = (state_min + data.uniform(0.5, 3, STATE_DIM)).astype(np.float32)
state_max[4] = state_min[4]
action_min = data.uniform(-1, 0, ACTION_DIM).astype(np.float32)
action_max = (action_min + data.uniform(0.2, 2, ACTION_DIM)).astype(np.float32)
stats = {"observation.state": {"min": torch.from_numpy(state_min), "max": torch.from_numpy(state_max)},
         "action": {"min": torch.from_numpy(action_min), "max": torch.from_numpy(action_max)}}
preprocessor, postprocessor = pg.make_groot_pre_post_processors(config, dataset_stats=stats)

# ---- cases: frame sizes the transform must resize (LeRobot stacks a case's views: one size per
# case), a missing camera, a state out of range ----
CASES = [
    {"task": "Pick up the red cube, and place it in the bowl.", "sizes": {"front": (96, 128), "wrist": (96, 128)}},
    {"task": "open the top drawer", "sizes": {"front": (300, 200), "wrist": (300, 200)}, "state_scale": 1.6},
    {"task": "Push the BUTTON down!", "sizes": {"front": (256, 256)}},
]


def run_case(case: dict, k: int) -> dict:
    images = {name: data.integers(0, 256, (*hw, 3), dtype=np.uint8) for name, hw in case["sizes"].items()}
    span = state_max - state_min
    centre = (state_min + state_max) / 2
    state = (centre + case.get("state_scale", 0.8) * span / 2 * data.uniform(-1, 1, STATE_DIM)).astype(np.float32)
    state[4] += np.float32(0.3)
    batch = {f"observation.images.{name}": torch.from_numpy(image).permute(2, 0, 1).contiguous()
             for name, image in images.items()}
    batch["observation.state"] = torch.from_numpy(state)
    batch["task"] = case["task"]
    taps = {}
    vlm_step = next(s for s in preprocessor.steps if isinstance(s, pg.GrootN17VLMEncodeStep))
    original = vlm_step._build_sample_images

    def keep_frames(*args, **kwargs):
        frames = original(*args, **kwargs)
        taps["frames"] = [f.permute(1, 2, 0).numpy().copy() for f in frames[0]]
        return frames

    vlm_step._build_sample_images = keep_frames
    processed = preprocessor(batch)
    vlm_step._build_sample_images = original
    policy.reset()
    torch.manual_seed(SEED_NOISE + k)
    noise = torch.randn((1, HORIZON, MAX_DIM), generator=torch.Generator().manual_seed(SEED_NOISE + k))
    used = {}
    hook = policy._groot_model.action_head.action_encoder.register_forward_pre_hook(
        lambda m, a: None if "noise" in used else used.update(noise=a[0].detach().clone()))
    torch.manual_seed(SEED_NOISE + k)
    model_actions = policy.predict_action_chunk(processed)
    hook.remove()
    assert torch.equal(used["noise"], noise), "LeRobot drew other noise than recorded"
    actions = postprocessor(model_actions)
    text = vlm_step.proc.apply_chat_template(
        [{"role": "user", "content": [*[{"type": "image", "image": f} for f in taps["frames"]],
                                      {"type": "text", "text": processed["language"][0]
                                       if "language" in processed else case["task"]}]}],
        tokenize=False, add_generation_prompt=False)
    out = {f"case{k}_{name}_uint8": image for name, image in images.items()}
    present = sorted(images)
    for name, frame in zip(present, taps["frames"]):
        out[f"case{k}_{name}_view"] = frame
    out.update({
        f"case{k}_state_raw": state,
        f"case{k}_state": processed["state"][0, 0].numpy().astype(np.float32),
        f"case{k}_image_grid_thw": processed["image_grid_thw"].numpy().astype(np.int64),
        f"case{k}_tokens": processed["input_ids"][0].numpy().astype(np.int64),
        f"case{k}_embodiment_id": np.array(int(processed["embodiment_id"][0]), np.int64),
        f"case{k}_noise": noise[0].numpy(),
        f"case{k}_actions_model": model_actions[0].numpy().astype(np.float32),
        f"case{k}_actions": actions[0].numpy().astype(np.float32),
    })
    if len(present) == 1:  # patch rows take 1.5 MB a view; one case keeps them
        out[f"case{k}_pixel_values"] = processed["pixel_values"].numpy().astype(np.float32)
    return out, {"task": case["task"], "prompt": text, "cameras": present}


arrays, recorded = {}, []
for k, case in enumerate(CASES):
    case_arrays, notes = run_case(case, k)
    arrays.update(case_arrays)
    recorded.append(notes)
    print(f"case{k}: {notes['cameras']} tokens {case_arrays[f'case{k}_tokens'].size} "
          f"max|a| {np.abs(case_arrays[f'case{k}_actions']).max():.4f}", flush=True)

# the uint8 resize on its own, over sizes up and down (the runtime must match it bit for bit)
import torchvision.transforms.v2.functional as tvf
from torchvision.transforms import InterpolationMode

resize_cases = [((96, 128), (256, 256)), ((300, 200), (256, 256)), ((256, 256), (230, 230)), ((230, 230), (256, 256)),
                ((17, 40), (9, 70)), ((64, 64), (256, 256)), ((120, 160), (256, 256))]
for i, (src, dst) in enumerate(resize_cases):
    image = data.integers(0, 256, (*src, 3), dtype=np.uint8)
    resized = tvf.resize(torch.from_numpy(image).permute(2, 0, 1).contiguous(), list(dst),
                         interpolation=InterpolationMode.BICUBIC, antialias=True)
    arrays[f"resize{i}_in"] = image
    arrays[f"resize{i}_out"] = resized.permute(1, 2, 0).numpy().copy()

if CHECKPOINT.exists():
    for item in CHECKPOINT.iterdir():
        if item.name != "tokenizer":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
policy.save_pretrained(CHECKPOINT)
preprocessor.save_pretrained(CHECKPOINT)
postprocessor.save_pretrained(CHECKPOINT)
# a real save names the hub processor; this one was read from checkpoint/tokenizer
pipeline_file = CHECKPOINT / "policy_preprocessor.json"
pipeline_file.write_text(pipeline_file.read_text().replace(str(TOKENIZER_DIR), "nvidia/Cosmos-Reason2-2B"))
for item in CHECKPOINT.iterdir():
    if item.is_file():
        item.chmod(0o644)
np.savez_compressed(OUT / "cases.npz", **arrays)
import lerobot, transformers, torchvision
(OUT / "cases.json").write_text(json.dumps({
    "set": "groot_pipeline_tiny",
    "what": "GR00T N1.7 (LeRobot GrootPolicy) tiny random-weight checkpoint in LeRobot's save layout, "
            "raw frames + raw state + task -> physical actions through LeRobot's pre- and postprocessor",
    "model_dims": {"vision.num_heads": VISION["num_heads"], "vision.deepstack_indexes": VISION["deepstack"],
                   "text.mrope_section": TEXT["mrope_section"], "head.num_heads": 2, "head.vl_num_heads": 2},
    "state_names": [f"joint_{i}" for i in range(STATE_DIM)],
    "cases": recorded,
    "noise": "torch.randn((1, horizon, max_action_dim)) after torch.manual_seed(seed + case index)",
    "versions": {"lerobot": lerobot.__version__, "torch": torch.__version__,
                 "transformers": transformers.__version__, "torchvision": torchvision.__version__},
    "seeds": {"weights": SEED_WEIGHTS, "data": SEED_DATA, "noise": SEED_NOISE},
}, indent=1))
print("wrote", OUT)
