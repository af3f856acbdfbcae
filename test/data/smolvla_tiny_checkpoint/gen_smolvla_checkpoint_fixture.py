#!/usr/bin/env python
"""Generate a SmolVLA end-to-end record in lerobot's saved-checkpoint layout (lerobot 0.6.1).

Usage (in the reference environment, HF_HUB_OFFLINE=1):  python gen_smolvla_checkpoint_fixture.py OUT_DIR

1. trains a small byte-level BPE tokenizer (tokenizers library) on generated robot instructions and wraps
   it as a transformers PreTrainedTokenizerFast;
2. builds a tiny SmolVLAPolicy (smolvla_tiny's dimensions, other seeds) with lerobot's two hub lookups of
   the VLM answered locally, and re-draws every parameter;
3. builds the processors with make_smolvla_pre_post_processors(config, dataset_stats=...) (MEAN_STD state
   and action statistics) while lerobot's AutoTokenizer lookup is answered with the local tokenizer, and
   writes policy / preprocessor / postprocessor save_pretrained plus tokenizer.json into OUT/checkpoint;
4. runs each case the way lerobot inference does (prepare_observation_for_inference -> preprocessor ->
   predict_action_chunk(noise=...) -> postprocessor), twice (bit-identical), and writes cases.npz / cases.json.
"""
import json, os, platform, sys, types

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
import numpy as np
import tokenizers
import torch
import transformers
import lerobot
from torch import nn
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, PreTrainedTokenizerFast, SmolVLMConfig
from transformers.models.smolvlm.configuration_smolvlm import SmolVLMVisionConfig
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.policies.smolvla import SmolVLAConfig
from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors
from lerobot.policies.utils import prepare_observation_for_inference
import lerobot.policies.smolvla.modeling_smolvla as ms
import lerobot.policies.smolvla.smolvlm_with_expert as sw
import lerobot.processor.tokenizer_processor as tokenizer_processor

torch.set_num_threads(1)
out_dir = sys.argv[1]
ck = os.path.join(out_dir, "checkpoint")
os.makedirs(ck, exist_ok=True)
CPU = torch.device("cpu")
VLM_NAME = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
VOCAB, IMG, PATCH, SCALE = 512, 64, 8, 2
VIS = {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 2}
TXT = {"width": 64, "depth": 5, "mlp_dim": 128, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16}
CAMERAS = {"observation.images.front": (48, 80), "observation.images.wrist": (64, 64)}  # raw (h, w)
STATE_NAMES = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
CHUNK, ADIM, TOK_LEN, SEEDS = 10, 6, 24, {"torch_manual_seed": 0, "weights": 401, "data": 402, "stats": 403}
MARKER_IDS = {"fake_image_token_id": VOCAB - 3, "global_image_token_id": VOCAB - 2, "image_token_id": VOCAB - 1}
CASES = [{"task": "pick up the red cube and place it in the bowl", "missing": []},
         {"task": "open the drawer", "missing": [], "state_scale": 2.0},
         {"task": "push the green block to the left edge of the table, then return home", "missing":
          ["observation.images.front"]}]

# ---- 1. tokenizer
words = ("pick place put push pull open close the a red green blue cube block bowl drawer cup to on in into left "
         "right edge of table then return home slowly grasp lift rotate").split()
rng = np.random.default_rng(7)
corpus = [" ".join(rng.choice(words, rng.integers(3, 12))) for _ in range(400)] + [c["task"] for c in CASES]
bpe = Tokenizer(models.BPE())
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.decoder = decoders.ByteLevel()
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
assert len(tok) <= VOCAB - 3


# ---- 2. tiny policy, offline
def tiny_vlm_config():
    vision = SmolVLMVisionConfig(hidden_size=VIS["width"], intermediate_size=VIS["mlp_dim"],
                                 num_hidden_layers=VIS["depth"], num_attention_heads=VIS["num_heads"],
                                 image_size=IMG, patch_size=PATCH, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    text = LlamaConfig(vocab_size=VOCAB, hidden_size=TXT["width"], intermediate_size=TXT["mlp_dim"],
                       num_hidden_layers=TXT["depth"], num_attention_heads=TXT["num_heads"],
                       num_key_value_heads=TXT["num_kv_heads"], head_dim=TXT["head_dim"], hidden_act="silu",
                       rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
                       max_position_embeddings=8192, pad_token_id=0, tie_word_embeddings=False)
    return SmolVLMConfig(vision_config=vision, text_config=text, scale_factor=SCALE,
                         image_token_id=MARKER_IDS["image_token_id"], pad_token_id=0, tie_word_embeddings=False)


class _LocalAutoConfig:
    @staticmethod
    def from_pretrained(name, *a, **k):
        assert name == VLM_NAME, name
        return tiny_vlm_config()


class _LocalAutoProcessor:
    @staticmethod
    def from_pretrained(name, *a, **k):
        assert name == VLM_NAME, name
        return types.SimpleNamespace(tokenizer=types.SimpleNamespace(**MARKER_IDS))


class _LocalAutoTokenizer:
    @staticmethod
    def from_pretrained(name, *a, **k):
        assert name == VLM_NAME, name
        return tok


sw.AutoConfig, sw.AutoProcessor = _LocalAutoConfig, _LocalAutoProcessor
cfg = SmolVLAConfig(device="cpu", chunk_size=CHUNK, n_action_steps=CHUNK, max_state_dim=32, max_action_dim=32,
                    resize_imgs_with_padding=(IMG, IMG), empty_cameras=1, tokenizer_max_length=TOK_LEN, num_steps=10,
                    vlm_model_name=VLM_NAME, load_vlm_weights=False, add_image_special_tokens=False,
                    attention_mode="cross_attn", num_expert_layers=0, num_vlm_layers=4, self_attn_every_n_layers=2,
                    expert_width_multiplier=0.75,
                    input_features={**{c: PolicyFeature(FeatureType.VISUAL, (3, *hw)) for c, hw in CAMERAS.items()},
                                    "observation.state": PolicyFeature(FeatureType.STATE, (len(STATE_NAMES),))},
                    output_features={"action": PolicyFeature(FeatureType.ACTION, (ADIM,))})
torch.manual_seed(SEEDS["torch_manual_seed"])
policy = ms.SmolVLAPolicy(cfg).eval()
norm_params = {f"{mn}.weight" for mn, m in policy.named_modules()
               if isinstance(m, nn.LayerNorm) or type(m).__name__.endswith("RMSNorm")}
g = torch.Generator().manual_seed(SEEDS["weights"])
with torch.no_grad():
    for n, p in policy.named_parameters():
        r = torch.randn(p.shape, generator=g)
        p.copy_(r * p[0].numel() ** -0.5 if p.ndim > 1 else (1.0 + 0.1 * r if n in norm_params else 0.1 * r))

# ---- 3. statistics, processors, save
gs = np.random.default_rng(SEEDS["stats"])
stats = {"observation.state": {"mean": gs.uniform(-1, 1, len(STATE_NAMES)), "std": gs.uniform(0.2, 2, len(STATE_NAMES))},
         "action": {"mean": gs.uniform(-1, 1, ADIM), "std": gs.uniform(0.2, 2, ADIM)}}
for s in stats.values():
    s["min"], s["max"] = s["mean"] - 3 * s["std"], s["mean"] + 3 * s["std"]
stats = {k: {n: torch.tensor(v, dtype=torch.float32) for n, v in s.items()} for k, s in stats.items()}
tokenizer_processor.AutoTokenizer, saved_auto = _LocalAutoTokenizer, tokenizer_processor.AutoTokenizer
try:
    pre, post = make_smolvla_pre_post_processors(cfg, dataset_stats=stats)
finally:
    tokenizer_processor.AutoTokenizer = saved_auto
policy.save_pretrained(ck)
pre.save_pretrained(ck)
post.save_pretrained(ck)
bpe_json = tok.backend_tokenizer.to_str()
open(os.path.join(ck, "tokenizer.json"), "w").write(bpe_json)


# ---- 4. cases
def run_case(raw_images, state, task, noise):
    obs = {**{k: v.copy() for k, v in raw_images.items()}, "observation.state": state.copy()}
    with torch.inference_mode():
        frame = prepare_observation_for_inference(obs, CPU, task, "so100")
        batch = pre(frame)
        chunk = policy.predict_action_chunk(batch, noise=noise.clone())
        return batch, chunk, post(chunk)


gd = np.random.default_rng(SEEDS["data"])
gn = torch.Generator().manual_seed(SEEDS["data"])
arrs, cases_json = {}, []
for k, c in enumerate(CASES):
    images = {cam: gd.integers(0, 256, (*hw, 3), dtype=np.uint8) for cam, hw in CAMERAS.items()}
    state = (gd.standard_normal(len(STATE_NAMES)) * c.get("state_scale", 1.0)).astype(np.float32)
    noise = torch.randn(1, CHUNK, 32, generator=gn)
    present = {cam: img for cam, img in images.items() if cam not in c["missing"]}
    b1, chunk1, final1 = run_case(present, state, c["task"], noise)
    _, chunk2, final2 = run_case(present, state, c["task"], noise)
    assert torch.equal(final1, final2) and torch.equal(chunk1, chunk2), "non-deterministic"
    tokens, mask = b1["observation.language.tokens"][0], b1["observation.language.attention_mask"][0].bool()
    assert tokens[mask].tolist() == bpe.encode(c["task"] + "\n").ids[:TOK_LEN], "tokenizer.json != processor"
    for cam, img in present.items():
        arrs[f"case{k}_{cam.split('.')[-1]}_uint8"] = img
    arrs[f"case{k}_state_raw"] = state
    arrs[f"case{k}_tokens"] = tokens.numpy().astype(np.int64)
    arrs[f"case{k}_token_mask"] = mask.numpy()
    arrs[f"case{k}_noise"] = noise[0].numpy()
    arrs[f"case{k}_actions_model"] = chunk1[0].numpy()
    arrs[f"case{k}_actions"] = final1[0].numpy()
    cases_json.append({"index": k, "task": c["task"], "missing_cameras": c["missing"],
                       "n_valid_tokens": int(mask.sum()), "max_abs_action": float(final1.abs().max())})
    print(f"case{k}: {int(mask.sum())} tokens, max|a|={final1.abs().max():.4f}")
np.savez(os.path.join(out_dir, "cases.npz"), **arrs)
info = {"set": "smolvla_tiny_checkpoint",
        "what": "SmolVLA (lerobot SmolVLAPolicy) tiny random-weight checkpoint in lerobot's save layout + end-to-end cases",
        "model_dims": {"vision": {"num_heads": VIS["num_heads"]}, "lm": {"num_heads": TXT["num_heads"],
                                                                     "head_dim": TXT["head_dim"]}},
        "raw_camera_hw": {cam: list(hw) for cam, hw in CAMERAS.items()}, "state_names": STATE_NAMES,
        "tokenizer": {"file": "checkpoint/tokenizer.json", "kind": "byte-level BPE", "vocab_size": len(tok),
                      "step_call": {"max_length": TOK_LEN, "truncation": True, "padding": "max_length",
                                    "padding_side": "right"}, "task_suffix": "\\n (NewLineTaskProcessorStep)"},
        "seeds": SEEDS, "cases": cases_json,
        "generated_by": {"lerobot": lerobot.__version__, "torch": torch.__version__,
                         "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                         "python": platform.python_version(), "script": os.path.basename(__file__),
                         "torch_num_threads": torch.get_num_threads()}}
json.dump(info, open(os.path.join(out_dir, "cases.json"), "w"), indent=1)
print("wrote", out_dir)
