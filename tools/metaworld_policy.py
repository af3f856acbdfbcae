"""What the Meta-World training tool and the PyTorch evaluation share (reference environment only:
LeRobot 0.6.1, torch): the small pi0.5 shape, the prompt tokenizer carried in the bundle, and the
checkpoint's pre/post-processors.

The tokenizer is a SentencePiece BPE model in which every state bin LeRobot can write into the prompt
(" -1" .. " 256") is one piece, with consecutive ids, so a bin is one token, as in the runtime.
"""
from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from embodied_ros.sim.metaworld import ACTION_NAMES, IMAGE_SIZE, STATE_NAMES, TASK_TEXT  # noqa: E402

import lerobot.policies.pi05.modeling_pi05 as mp  # noqa: E402
from lerobot.configs import FeatureType, PolicyFeature  # noqa: E402
from lerobot.policies.pi05 import PI05Config  # noqa: E402

CAMERA_KEY = "observation.images.corner"
BIN_PIECES = ["\u2581%d" % b for b in range(-1, 257)]  # what np.digitize(...) - 1 can give, with its space
FIRST_BIN_ID = 5  # pad 0, eos 1, bos 2, unk 3, "\n" 4, then the bins
DIMS = {  # the recipe in the project's notes: 2.4 M parameters, trains on 2 cores
    "vision": {"width": 128, "depth": 2, "mlp_dim": 512, "num_heads": 8},
    "lm": {"width": 128, "depth": 3, "mlp_dim": 512, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "expert": {"width": 128, "depth": 3, "mlp_dim": 512, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "patch_size": 16,
}
CHUNK, EXECUTED, FLOW_STEPS, PROMPT_TOKENS = 10, 5, 10, 32


def train_tokenizer(vocab_size: int = 400) -> bytes:
    lines = []
    rng = np.random.default_rng(0)
    for _ in range(3000):
        task = TASK_TEXT[list(TASK_TEXT)[rng.integers(len(TASK_TEXT))]]
        state = " ".join(str(b) for b in rng.integers(-1, 257, len(STATE_NAMES)))
        lines.append(f"Task: {task}, State: {state};\nAction: ")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type="bpe",
        byte_fallback=False, split_digits=False, add_dummy_prefix=False, normalization_rule_name="identity",
        remove_extra_whitespaces=False, character_coverage=1.0, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        user_defined_symbols=["\n"] + BIN_PIECES, hard_vocab_limit=False, num_threads=1, minloglevel=2)
    data = model.getvalue()
    sp = spm.SentencePieceProcessor(model_proto=data)
    assert [sp.piece_to_id(p) for p in BIN_PIECES] == list(range(FIRST_BIN_ID, FIRST_BIN_ID + len(BIN_PIECES)))
    return data


class PromptTokenizer:
    """Called like transformers' tokenizers by LeRobot's TokenizerProcessorStep: [bos] + pieces, truncated
    and right-padded to max_length (what the runtime's sequence.tokenizer does)."""

    def __init__(self, model_bytes: bytes) -> None:
        self.sp = spm.SentencePieceProcessor(model_proto=model_bytes)

    def ids(self, text: str, max_length: int) -> tuple[list[int], list[int]]:
        ids = ([2] + self.sp.encode(text))[:max_length]
        return ids + [0] * (max_length - len(ids)), [1] * len(ids) + [0] * (max_length - len(ids))

    def __call__(self, text, max_length, truncation=True, padding="max_length", padding_side="right",
                 return_tensors="pt"):
        rows = [self.ids(t, max_length) for t in ([text] if isinstance(text, str) else text)]
        return {"input_ids": torch.tensor([r[0] for r in rows], dtype=torch.long),
                "attention_mask": torch.tensor([r[1] for r in rows], dtype=torch.long)}


def apply_shrink(vocab_size: int) -> None:
    """PI05Config names only the variants (gemma_2b / gemma_300m); the small sizes are set here."""
    keys = ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim")
    mp.get_gemma_config = lambda v: mp.GemmaConfig(**{k: DIMS["lm" if v == "gemma_2b" else "expert"][k] for k in keys})
    paligemma, expert = mp.PaliGemmaForConditionalGenerationWithPiGemma, mp.PiGemmaForCausalLM
    if getattr(paligemma, "_shrunk", False):
        return

    def small_paligemma(config):
        v, vis = config.vision_config, DIMS["vision"]
        v.hidden_size, v.intermediate_size = vis["width"], vis["mlp_dim"]
        v.num_hidden_layers, v.num_attention_heads, v.patch_size = vis["depth"], vis["num_heads"], DIMS["patch_size"]
        v.projection_dim = config.text_config.hidden_size
        config.text_config.vocab_size = vocab_size
        return paligemma(config=config)

    def small_expert(config):
        config.vocab_size = vocab_size
        return expert(config=config)

    small_paligemma._shrunk = True
    mp.PaliGemmaForConditionalGenerationWithPiGemma, mp.PiGemmaForCausalLM = small_paligemma, small_expert


def policy_config() -> PI05Config:
    return PI05Config(
        device="cpu", dtype="float32", image_resolution=(IMAGE_SIZE, IMAGE_SIZE), chunk_size=CHUNK,
        n_action_steps=EXECUTED, tokenizer_max_length=PROMPT_TOKENS, num_inference_steps=FLOW_STEPS,
        action_feature_names=list(ACTION_NAMES),
        input_features={"observation.state": PolicyFeature(FeatureType.STATE, (len(STATE_NAMES),)),
                        CAMERA_KEY: PolicyFeature(FeatureType.VISUAL, (3, IMAGE_SIZE, IMAGE_SIZE))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (len(ACTION_NAMES),))})


def load(checkpoint: Path):
    """(policy, preprocessor, postprocessor, tokenizer) from a saved checkpoint folder."""
    from lerobot.policies.factory import make_pre_post_processors
    model_bytes = (checkpoint / "tokenizer.model").read_bytes()
    tokenizer = PromptTokenizer(model_bytes)
    apply_shrink(json.loads((checkpoint / "training.json").read_text())["vocab_size"])
    policy = mp.PI05Policy.from_pretrained(str(checkpoint)).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(checkpoint),
                                         preprocessor_overrides={"tokenizer_processor": {"tokenizer": tokenizer}})
    return policy, pre, post, tokenizer
