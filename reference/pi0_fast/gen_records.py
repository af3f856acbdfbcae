#!/usr/bin/env python
"""Records of LeRobot's PI0FastPolicy (lerobot 0.6.1) at a tiny size, for embodied_ros's pi0_fast family.

Runs in the PyTorch reference environment (torch, lerobot, transformers, scipy, sentencepiece), offline:

    HF_HUB_OFFLINE=1 "$EMBODIED_ROS_REF_PYTHON" reference/pi0_fast/gen_records.py OUT_DIR

and writes OUT_DIR/pi0_fast_tiny (the model-level record) and OUT_DIR/pi0_fast_tiny_checkpoint (a
LeRobot save with its processors, and cases from raw robot inputs). What the records hold, the
stand-in tokenizers and how the random weights are made to decode: reference/pi0_fast/README.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import sentencepiece  # noqa: E402
import torch  # noqa: E402

import lerobot  # noqa: E402
import lerobot.policies.pi0_fast.modeling_pi0_fast as fast_modeling  # noqa: E402
import lerobot.processor.tokenizer_processor as tokenizer_processor  # noqa: E402
from lerobot.configs import FeatureType, PolicyFeature  # noqa: E402
from lerobot.policies.molmoact2.molmoact2_hf_model.action_tokenizer import UniversalActionProcessor  # noqa: E402
from lerobot.policies.pi0_fast.configuration_pi0_fast import PI0FastConfig  # noqa: E402
from lerobot.lerobot_types import TransitionKey  # noqa: E402
from lerobot.policies.pi0_fast.processor_pi0_fast import (  # noqa: E402
    Pi0FastPrepareStateAndLanguageTokenizerProcessorStep, make_pi0_fast_pre_post_processors)
from lerobot.policies.utils import prepare_observation_for_inference  # noqa: E402

VISION = {"width": 48, "depth": 2, "mlp_dim": 96, "num_heads": 4}
LM = {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16}
PATCH, RESOLUTION = 14, 56
CAMERAS = {"observation.images.base_0_rgb": (96, 128), "observation.images.wrist_0_rgb": (64, 64)}
STATE_NAMES = ["shoulder_pan", "shoulder_lift", "elbow", "wrist_flex", "wrist_roll", "wrist_yaw", "gripper",
               "gripper_force"]
ACTION_NAMES = STATE_NAMES[:7]
CHUNK, PROMPT_TOKENS, MAX_DECODING_STEPS = 10, 52, 40
PALIGEMMA_PIECES = 640  # the stand-in tokenizer's size, and the LM's vocabulary
FAST_VOCAB, FAST_SCALE = 240, 10.0
SEEDS = {"torch_manual_seed": 40, "weights": 41, "data": 42, "tokenizers": 43}
# how the random weights are made to decode (README.md): a shared direction u in every token embedding,
# the FAST ids' rows of the LM head leaning toward it, sharper attention in the LM
EMBEDDING_LEAN, ACTION_LEAN, ATTENTION_SHARPNESS = 2.0, 3.0, 5.0
STOP_LEANS = np.round(np.arange(2.0, 4.51, 0.05), 2)  # tried in order; "|"'s lean toward u
MIN_MARGIN = 2e-4  # every step's top logit leads the next by this much, ~20x what float32 rounding moves it

MODEL_CASES = [  # prompt task, state bins (None: random), valid prompt tokens (None: all), missing cameras
    {"task": "pick up the red cube and put it in the bowl", "missing_cameras": []},
    {"task": "open the top drawer of the white cabinet, take out the small blue screwdriver, put it on the "
             "table next to the green cup and close the drawer again", "missing_cameras": []},
    {"task": "push the button", "missing_cameras": ["observation.images.wrist_0_rgb"]},
    {"task": "stack the green block on the blue plate", "missing_cameras": []},
]
PIPELINE_CASES = [
    {"task": "pick up the red cube and put it in the bowl", "missing_cameras": [], "state_scale": 1.0},
    {"task": "stack_the green block on the blue plate, then push the red cube behind the white cabinet\n",
     "missing_cameras": [], "state_scale": 3.0},
    {"task": "wipe the table", "missing_cameras": ["observation.images.wrist_0_rgb"], "state_scale": 0.5},
]


# ---- the stand-in PaliGemma tokenizer -------------------------------------------------------------

def tokenizer_corpus(rng: np.random.Generator) -> list[str]:
    """Robot instructions and pi0-FAST prompts (with state bins), plus the decoding's own pieces."""
    verbs = ["pick up", "put", "move", "push", "open", "close", "stack", "place", "grab", "wipe", "turn", "lift"]
    things = ["the red cube", "the blue plate", "the green block", "the drawer", "the cup", "the bowl",
              "the small screwdriver", "the white cabinet", "the table", "the button", "the lid", "the sponge"]
    places = ["in the bowl", "on the plate", "next to the cup", "into the box", "on the table", "to the left",
              "to the right", "behind the cabinet", "under the shelf"]
    lines = []
    for _ in range(1500):
        task = f"{rng.choice(verbs)} {rng.choice(things)} {rng.choice(places)}"
        if rng.random() < 0.3:
            task += f" and {rng.choice(verbs)} {rng.choice(things)}"
        bins = " ".join(str(b) for b in rng.integers(-1, 256, int(rng.integers(4, 10))))
        lines.append(f"Task: {task}, State: {bins};\n")
        lines.append("Action: " + "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz .,"), 12)) + "|")
    return lines


def train_paligemma_standin(rng: np.random.Generator) -> bytes:
    """A SentencePiece BPE with Gemma's conventions (no dummy prefix, identity normalization, byte
    fallback, digits split, whitespace kept) and ids pad 0, eos 1, bos 2, unk 3; "|" and "Action" are
    pieces of their own, as in PaliGemma's vocabulary."""
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(tokenizer_corpus(rng)), model_writer=model, vocab_size=PALIGEMMA_PIECES,
        model_type="bpe", byte_fallback=True, split_digits=True, add_dummy_prefix=False,
        normalization_rule_name="identity", remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        user_defined_symbols=["|", "Action", "\n"], pad_id=0, eos_id=1, bos_id=2, unk_id=3, minloglevel=2)
    return model.getvalue()


class PaliGemmaStandIn:
    """The transformers tokenizer calls LeRobot makes, answered by the stand-in SentencePiece model:
    [bos] + pieces for a prompt (truncated, right-padded with pad 0), and piece <-> id lookups."""

    def __init__(self, model: bytes) -> None:
        self.sp = sentencepiece.SentencePieceProcessor(model_proto=model)
        self.bos_token_id, self.pad_token_id = self.sp.bos_id(), self.sp.pad_id()
        self.vocab_size = self.sp.get_piece_size()

    def __call__(self, texts, max_length, truncation=True, padding="max_length", padding_side="right",
                 return_tensors="pt", **_):
        assert padding == "max_length" and padding_side == "right" and truncation
        ids = torch.full((len(texts), max_length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(texts), max_length), dtype=torch.long)
        for row, text in enumerate(texts):
            encoded = ([self.bos_token_id] + self.sp.encode(text))[:max_length]
            ids[row, : len(encoded)] = torch.tensor(encoded)
            mask[row, : len(encoded)] = 1
        return {"input_ids": ids, "attention_mask": mask}

    def encode(self, text, add_special_tokens=True):
        return ([self.bos_token_id] if add_special_tokens else []) + self.sp.encode(text)

    def convert_ids_to_tokens(self, ids):
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self.sp.piece_to_id(tokens)
        return [self.sp.piece_to_id(token) for token in tokens]


# ---- the stand-in FAST action tokenizer ---------------------------------------------------------

def action_chunks(rng: np.random.Generator, count: int, amplitude: float) -> list[np.ndarray]:
    """Smooth made-up chunks [CHUNK, action dim] in normalized units (random walks, offsets, ramps)."""
    chunks = []
    for _ in range(count):
        walk = np.cumsum(rng.standard_normal((CHUNK, len(ACTION_NAMES))) * 0.15, axis=0)
        ramp = np.linspace(0, 1, CHUNK)[:, None] * rng.standard_normal(len(ACTION_NAMES)) * 0.5
        chunks.append(amplitude * (walk + ramp + rng.uniform(-0.6, 0.6, len(ACTION_NAMES))))
    return chunks


def fit_fast_standin(rng: np.random.Generator, amplitude: float,
                     vocab_size: int) -> tuple[UniversalActionProcessor, int]:
    """FAST's universal tokenizer fitted offline (lerobot's `fit`: DCT, quantization, byte-level BPE),
    and the number of characters its quantized coefficients span."""
    from scipy.fft import dct

    chunks = action_chunks(rng, 600, amplitude)
    quantized = np.concatenate([np.around(dct(c, axis=0, norm="ortho") * FAST_SCALE).ravel() for c in chunks])
    processor = UniversalActionProcessor.fit(chunks, scale=FAST_SCALE, vocab_size=vocab_size, time_horizon=CHUNK,
                                             action_dim=len(ACTION_NAMES))
    return processor, int(quantized.max() - quantized.min()) + 1


def save_fast(processor: UniversalActionProcessor, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    processor.bpe_tokenizer.save_pretrained(str(folder))
    config = {"scale": processor.scale, "vocab_size": processor.vocab_size, "min_token": processor.min_token,
              "time_horizon": CHUNK, "action_dim": len(ACTION_NAMES)}
    (folder / "processor_config.json").write_text(json.dumps(config, indent=1) + "\n")


# ---- the tiny policy ------------------------------------------------------------------------------

def shrink(paligemma_tokenizer: PaliGemmaStandIn, fast: UniversalActionProcessor) -> None:
    """lerobot builds PaliGemma at full size from hub assets; these replace, inside its modules, the Gemma
    variant table, the PaliGemma constructor (vision and vocabulary sizes) and the two tokenizer loaders."""
    gemma_keys = ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim")
    fast_modeling.get_gemma_config = lambda variant: fast_modeling.GemmaConfig(**{k: LM[k] for k in gemma_keys})
    paligemma = fast_modeling.PaliGemmaForConditionalGenerationWithPiGemma

    def small_paligemma(config):
        vision = config.vision_config
        vision.hidden_size, vision.intermediate_size = VISION["width"], VISION["mlp_dim"]
        vision.num_hidden_layers, vision.num_attention_heads = VISION["depth"], VISION["num_heads"]
        vision.patch_size, vision.image_size = PATCH, RESOLUTION
        vision.projection_dim = config.text_config.hidden_size
        config.text_config.vocab_size = config._vocab_size = paligemma_tokenizer.vocab_size
        return paligemma(config=config)

    class Loader:
        def __init__(self, made):
            self.made = made

        def from_pretrained(self, name, *args, **kwargs):
            return self.made

    fast_modeling.PaliGemmaForConditionalGenerationWithPiGemma = small_paligemma
    fast_modeling.AutoTokenizer = tokenizer_processor.AutoTokenizer = Loader(paligemma_tokenizer)
    fast_modeling.AutoProcessor = tokenizer_processor.AutoProcessor = Loader(fast)


def make_config() -> PI0FastConfig:
    return PI0FastConfig(
        device="cpu", dtype="float32", image_resolution=(RESOLUTION, RESOLUTION), chunk_size=CHUNK,
        n_action_steps=CHUNK, tokenizer_max_length=PROMPT_TOKENS, max_decoding_steps=MAX_DECODING_STEPS,
        max_action_tokens=64, validate_action_token_prefix=False, action_feature_names=list(ACTION_NAMES),
        input_features={"observation.state": PolicyFeature(FeatureType.STATE, (len(STATE_NAMES),)),
                        **{c: PolicyFeature(FeatureType.VISUAL, (3, *hw)) for c, hw in CAMERAS.items()}},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (len(ACTION_NAMES),))})


def paligemma_parts(policy):
    paligemma = policy.model.paligemma_with_expert.paligemma
    return paligemma, paligemma.model.language_model, paligemma.lm_head


def randomize(policy, generator: torch.Generator) -> None:
    """Every parameter redrawn: randn * fan_in**-0.5 for matrices, 0.1 * randn for vectors."""
    with torch.no_grad():
        for _, p in policy.named_parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * (p.shape[-1] ** -0.5 if p.ndim > 1 else 0.1))


def lean_toward_actions(policy, generator: torch.Generator, action_ids: np.ndarray) -> torch.Tensor:
    """Random weights rarely pick FAST ids: every token embedding row gets EMBEDDING_LEAN * u (one random
    unit vector; the LM reads the rows times sqrt(width)), so the LM's last hidden state leans toward u;
    the LM head's rows of the FAST ids get ACTION_LEAN * u, so those ids lead; q and k of every LM layer
    are scaled by ATTENTION_SHARPNESS, so that attention picks rows and the next id depends on the
    images and the prompt. Returns u."""
    _, language_model, lm_head = paligemma_parts(policy)
    u = torch.randn(LM["width"], generator=generator)
    u /= u.norm()
    with torch.no_grad():
        language_model.embed_tokens.weight += EMBEDDING_LEAN * u
        lm_head.weight[torch.as_tensor(action_ids)] += ACTION_LEAN * u
        for layer in language_model.layers:
            layer.self_attn.q_proj.weight *= ATTENTION_SHARPNESS
            layer.self_attn.k_proj.weight *= ATTENTION_SHARPNESS
    return u


# ---- running cases --------------------------------------------------------------------------------

class Watch:
    """Hooks on one prediction: the generated ids, each step's logit margin, and (when asked) the taps."""

    def __init__(self, policy, taps: bool = False) -> None:
        self.policy, self.taps_wanted = policy, taps
        self.margins, self.taps, self.tokens = [], {}, None

    def __enter__(self):
        paligemma, _, lm_head = paligemma_parts(self.policy)
        model = self.policy.model
        self.handles = [lm_head.register_forward_hook(self._logits)]
        if self.taps_wanted:
            self.projected = []
            self.handles.append(paligemma.model.multi_modal_projector.register_forward_hook(
                lambda module, args, out: self.projected.append(out.detach().clone())))
        self.sample, self.forward = model.sample_actions_fast_kv_cache, model.paligemma_with_expert.forward

        def sample(*args, **kwargs):
            self.tokens = self.sample(*args, **kwargs)
            return self.tokens

        def forward(*args, **kwargs):
            outputs, cache = self.forward(*args, **kwargs)
            if self.taps_wanted and "kv" not in self.taps:
                self.taps["kv"] = [(layer.keys[0].transpose(0, 1).clone(), layer.values[0].transpose(0, 1).clone())
                                   for layer in cache.layers]
            return outputs, cache

        model.sample_actions_fast_kv_cache, model.paligemma_with_expert.forward = sample, forward
        return self

    def _logits(self, module, args, out):
        logits = out[0, -1].detach()
        if "first_logits" not in self.taps:
            self.taps["first_logits"] = logits.clone()
        top = torch.topk(logits, 2).values
        self.margins.append(float(top[0] - top[1]))

    def __exit__(self, *exc):
        model = self.policy.model
        model.sample_actions_fast_kv_cache, model.paligemma_with_expert.forward = self.sample, self.forward
        for handle in self.handles:
            handle.remove()


def model_batch(case: dict) -> dict:
    batch = {camera: case["images"][i:i + 1].clone() for i, camera in enumerate(CAMERAS)
             if camera not in case["missing_cameras"]}
    batch["observation.language.tokens"] = case["tokens"][None].clone()
    batch["observation.language.attention_mask"] = case["token_mask"][None].clone()
    return batch


def run_model_case(policy, case: dict, taps: bool = False):
    with torch.inference_mode(), Watch(policy, taps) as watch:
        actions = policy.predict_action_chunk(model_batch(case))
    return actions[0].clone(), watch


def run_pipeline_case(policy, pre, post, case: dict):
    """(batch, model-space chunk, physical chunk, watch, the prompt LeRobot's preprocessor wrote)."""
    step_type = Pi0FastPrepareStateAndLanguageTokenizerProcessorStep
    prompts, make_prompt = [], step_type.__call__

    def recorded(step, transition):
        transition = make_prompt(step, transition)
        prompts.extend(transition[TransitionKey.COMPLEMENTARY_DATA]["task"])
        return transition

    step_type.__call__ = recorded
    try:
        with torch.inference_mode(), Watch(policy) as watch:
            frame = prepare_observation_for_inference({**case["images"], "observation.state": case["state"]},
                                                      torch.device("cpu"), case["task"], "tiny_arm")
            batch = pre(frame)
            chunk = policy.predict_action_chunk(batch)
            return batch, chunk[0].clone(), post(chunk)[0].clone(), watch, prompts[0]
    finally:
        step_type.__call__ = make_prompt


def decoding_summary(tokens: torch.Tensor, stop_id: int, action_ids: set[int]) -> dict:
    ids = tokens[0].tolist()
    stop_at = ids.index(stop_id) if stop_id in ids else None
    generated = ids if stop_at is None else ids[: stop_at + 1]
    return {"generated": len(generated), "stopped_at_step": stop_at,
            "all_action_ids": all(i in action_ids for i in generated[: stop_at])}


def model_cases(rng: np.random.Generator, generator: torch.Generator, tokenizer: PaliGemmaStandIn) -> list[dict]:
    cases = []
    for spec in MODEL_CASES:
        bins = " ".join(str(b) for b in rng.integers(-1, 256, len(STATE_NAMES)))
        prompt = f"Task: {spec['task']}, State: {bins};\n"
        encoded = tokenizer([prompt], PROMPT_TOKENS)
        pixels = torch.randint(0, 256, (len(CAMERAS), 3, RESOLUTION, RESOLUTION), generator=generator)
        cases.append({**spec, "prompt": prompt, "images": pixels.float() / 255.0,
                      "tokens": encoded["input_ids"][0], "token_mask": encoded["attention_mask"][0].bool()})
    return cases


def pipeline_cases(rng: np.random.Generator, stats: dict) -> list[dict]:
    mean, std = (stats["observation.state"][k].numpy() for k in ("mean", "std"))
    cases = []
    for spec in PIPELINE_CASES:
        images = {camera: rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for camera, hw in CAMERAS.items()}
        state = (mean + spec["state_scale"] * std * rng.standard_normal(len(STATE_NAMES))).astype(np.float32)
        cases.append({**spec, "images": {c: v for c, v in images.items() if c not in spec["missing_cameras"]},
                      "state": state})
    return cases


def dataset_stats(rng: np.random.Generator) -> dict:
    """Per-joint statistics of a made-up dataset (every statistic LeRobot's normalizer may read)."""
    stats = {}
    for key, dim in (("observation.state", len(STATE_NAMES)), ("action", len(ACTION_NAMES))):
        mean, std = rng.uniform(-1.0, 1.0, dim), rng.uniform(0.05, 2.0, dim)
        values = {"mean": mean, "std": std, "min": mean - 2.5 * std, "max": mean + 2.5 * std,
                  "q01": mean - 2.2 * std, "q99": mean + 2.2 * std}
        stats[key] = {name: torch.tensor(value, dtype=torch.float32) for name, value in values.items()}
    return stats


def choose_stop_lean(policy, pre, post, u, stop_id, action_ids, model_inputs, pipeline_inputs) -> tuple[float, list]:
    """The first lean of "|" toward u with which every case decodes to FAST ids (then "|" or the step
    limit) with a clear argmax at every step, at least one model case stops early and one runs to
    max_decoding_steps."""
    _, _, lm_head = paligemma_parts(policy)
    base = lm_head.weight[stop_id].detach().clone()
    for lean in STOP_LEANS:
        with torch.no_grad():
            lm_head.weight[stop_id] = base + float(lean) * u
        summaries, margins = [], []
        for case in model_inputs:
            _, watch = run_model_case(policy, case)
            summaries.append(decoding_summary(watch.tokens, stop_id, action_ids))
            margins += watch.margins
        for case in pipeline_inputs:
            watch = run_pipeline_case(policy, pre, post, case)[3]
            summaries.append(decoding_summary(watch.tokens, stop_id, action_ids))
            margins += watch.margins
        stops = [s["stopped_at_step"] for s in summaries[: len(model_inputs)]]
        if (all(s["all_action_ids"] for s in summaries) and min(margins) >= MIN_MARGIN
                and any(s is not None and 4 <= s < MAX_DECODING_STEPS - 4 for s in stops) and None in stops):
            print(f"stop lean {lean}: steps {[s['stopped_at_step'] for s in summaries]}, min margin "
                  f"{min(margins):.3g}", flush=True)
            return float(lean), summaries
    raise SystemExit("no stop lean in STOP_LEANS decodes as wanted; change the seeds or the leans")


# ---- detokenizer vectors --------------------------------------------------------------------------

def detokenizer_vectors(policy, tokenizer: PaliGemmaStandIn, rng: np.random.Generator) -> tuple[list, dict]:
    """Hand-made PaliGemma id sequences through LeRobot's detokenize_actions, with and without the
    "Action:" check: (descriptions, arrays)."""
    vocab, skip = tokenizer.vocab_size, policy.config.fast_skip_tokens
    fast_ids = lambda count: (vocab - 1 - skip - rng.integers(0, FAST_VOCAB, count)).tolist()  # noqa: E731
    stop, prefix = tokenizer.convert_tokens_to_ids("|"), tokenizer.encode("Action: ", add_special_tokens=False)
    sequences = {
        "prefix, tokens, stop": prefix + fast_ids(14) + [stop],
        "tokens, stop": fast_ids(20) + [stop],
        "no stop": fast_ids(MAX_DECODING_STEPS),
        "stop first": [stop],
        "prefix in the middle": fast_ids(5) + prefix + fast_ids(6) + [stop] + fast_ids(3),
        "'Action' ':' without the space piece": prefix[:2] + fast_ids(9) + [stop],
        "a low id (FAST id past the vocabulary)": fast_ids(4) + [10] + fast_ids(4) + [stop],
        "an id in the skipped top": fast_ids(4) + [vocab - 3] + fast_ids(3) + [stop],
        "many tokens (cut)": fast_ids(MAX_DECODING_STEPS - 1) + [stop],
    }
    described, arrays = [], {}
    for j, (what, ids) in enumerate(sequences.items()):
        padded = torch.zeros(MAX_DECODING_STEPS, dtype=torch.long)
        padded[: len(ids)] = torch.tensor(ids[:MAX_DECODING_STEPS])
        arrays[f"detok{j}_ids"] = padded.numpy()
        entry = {"index": j, "what": what}
        for validate in (False, True):
            policy.config.validate_action_token_prefix = validate
            try:
                actions = policy.detokenize_actions(padded, CHUNK, len(ACTION_NAMES))
                arrays[f"detok{j}_actions_{'checked' if validate else 'unchecked'}"] = actions.numpy()
                entry["checked" if validate else "unchecked"] = "actions"
            except AssertionError:
                entry["checked" if validate else "unchecked"] = "raises"
        described.append(entry)
    policy.config.validate_action_token_prefix = False
    return described, arrays


def bpe_vectors(processor: UniversalActionProcessor, rng: np.random.Generator, count: int) -> tuple[list, list]:
    """Random FAST id sequences (some past the vocabulary) and what the BPE decodes them to, as code points."""
    sequences, decoded = [], []
    for _ in range(count):
        ids = rng.integers(0, len(processor.bpe_tokenizer) + 8, int(rng.integers(0, 30))).tolist()
        sequences.append(ids)
        decoded.append([ord(c) for c in processor.bpe_tokenizer.decode(ids)])
    return sequences, decoded


# ---- writing --------------------------------------------------------------------------------------

def versions() -> dict:
    import transformers
    return {"lerobot": lerobot.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "numpy": np.__version__,
            "script": "reference/pi0_fast/gen_records.py", "torch_num_threads": torch.get_num_threads()}


MODEL_README = """# pi0_fast_tiny: LeRobot's PI0FastPolicy at a tiny size, model-level record

Made by `reference/pi0_fast/gen_records.py` (lerobot 0.6.1) in the PyTorch reference environment; what it
holds and why: `reference/pi0_fast/README.md`. `config.json` + `model.safetensors` are the policy's
`save_pretrained`; `tokenizer.model` (stand-in PaliGemma SentencePiece) and `action_tokenizer/` (stand-in
FAST processor: tokenizer.json, processor_config.json) are what the save only names; `wide_action_tokenizer/`
is a FAST tokenizer with multi-byte characters for the byte-level decoding vectors; `cases.json` has the
head counts (`model_dims`), the cases, the detokenizer vectors and the BPE vectors; `cases.npz` the arrays.
"""

CHECKPOINT_README = """# pi0_fast_tiny_checkpoint: the whole pi0-FAST pipeline, in LeRobot's checkpoint layout

Made by `reference/pi0_fast/gen_records.py` (lerobot 0.6.1); the same tiny policy as `../pi0_fast_tiny`,
saved with its pre/post-processors (MEAN_STD statistics of a made-up dataset) in `checkpoint/`, plus the
stand-in tokenizers (`tokenizer.model`, `action_tokenizer/`), and cases run from raw uint8 images (96x128,
64x64), physical state and task text to physical actions (`cases.json`: tasks, the prompts LeRobot wrote;
`cases.npz`: inputs, prompt ids, generated ids, model-space and physical actions). Details:
`reference/pi0_fast/README.md`.
"""


def write_tokenizers(folder: Path, paligemma_model: bytes, fast: UniversalActionProcessor) -> None:
    (folder / "tokenizer.model").write_bytes(paligemma_model)
    save_fast(fast, folder / "action_tokenizer")


def main(out: Path) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEEDS["tokenizers"])
    paligemma_model = train_paligemma_standin(rng)
    tokenizer = PaliGemmaStandIn(paligemma_model)
    fast, span = fit_fast_standin(rng, 1.0, FAST_VOCAB)
    assert span <= 128, f"the record's FAST characters should be one UTF-8 byte each, they span {span}"
    wide, wide_span = fit_fast_standin(rng, 2.5, 640)  # multi-byte UTF-8 characters, for the BPE vectors only
    assert wide_span > 160, wide_span
    shrink(tokenizer, fast)
    stop_id = tokenizer.convert_tokens_to_ids("|")
    config = make_config()
    action_ids = set((tokenizer.vocab_size - 1 - config.fast_skip_tokens - np.arange(len(fast.bpe_tokenizer))).tolist())

    torch.manual_seed(SEEDS["torch_manual_seed"])
    policy = fast_modeling.PI0FastPolicy(config).eval()
    weights = torch.Generator().manual_seed(SEEDS["weights"])
    randomize(policy, weights)
    u = lean_toward_actions(policy, weights, np.array(sorted(action_ids)))

    data_rng, data_torch = np.random.default_rng(SEEDS["data"]), torch.Generator().manual_seed(SEEDS["data"])
    stats = dataset_stats(data_rng)
    pre, post = make_pi0_fast_pre_post_processors(config, dataset_stats=stats)
    model_inputs = model_cases(data_rng, data_torch, tokenizer)
    pipeline_inputs = pipeline_cases(data_rng, stats)
    stop_lean, summaries = choose_stop_lean(policy, pre, post, u, stop_id, action_ids, model_inputs, pipeline_inputs)

    # the model-level record
    record = out / "pi0_fast_tiny"
    record.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(record)
    write_tokenizers(record, paligemma_model, fast)
    save_fast(wide, record / "wide_action_tokenizer")
    arrays, described = {}, []
    for k, case in enumerate(model_inputs):
        actions, watch = run_model_case(policy, case, taps=k == 0)
        again, _ = run_model_case(policy, case)
        assert torch.equal(actions, again), "the reference is not repeatable"
        arrays[f"case{k}_images"] = case["images"].numpy()
        arrays[f"case{k}_image_masks"] = np.array([c not in case["missing_cameras"] for c in CAMERAS])
        arrays[f"case{k}_tokens"] = case["tokens"].numpy().astype(np.int64)
        arrays[f"case{k}_token_mask"] = case["token_mask"].numpy()
        arrays[f"case{k}_generated_tokens"] = watch.tokens[0].numpy().astype(np.int64)
        arrays[f"case{k}_actions"] = actions.numpy()
        if k == 0:
            arrays["case0_image_embeddings"] = torch.cat(watch.projected, 1)[0].numpy()
            for name, layer in (("layer0", 0), ("layerLAST", LM["depth"] - 1)):
                arrays[f"case0_prefix_k_{name}"] = watch.taps["kv"][layer][0].numpy()
                arrays[f"case0_prefix_v_{name}"] = watch.taps["kv"][layer][1].numpy()
            image_rows = np.repeat(arrays["case0_image_masks"], (RESOLUTION // PATCH) ** 2)
            arrays["case0_prefix_pad_mask"] = np.concatenate([image_rows, arrays["case0_token_mask"], [True]])
            arrays["case0_first_logits"] = watch.taps["first_logits"].numpy()
        described.append({"task": case["task"], "prompt": case["prompt"], "valid_tokens": int(case["token_mask"].sum()),
                          "missing_cameras": case["missing_cameras"], "min_margin": min(watch.margins),
                          **summaries[k], "max_abs_action": float(actions.abs().max())})
        print(f"model case{k}: {summaries[k]} max|a| {float(actions.abs().max()):.3f}", flush=True)
    vectors, vector_arrays = detokenizer_vectors(policy, tokenizer, np.random.default_rng(SEEDS["data"] + 1))
    arrays.update(vector_arrays)
    bpe_ids, bpe_code_points = bpe_vectors(wide, np.random.default_rng(SEEDS["data"] + 2), 60)
    np.savez_compressed(record / "cases.npz", **arrays)
    model_dims = {"vision": VISION, "lm": LM, "vocab_size": tokenizer.vocab_size, "patch_size": PATCH}
    recipe = {"weights": "every parameter randn * fan_in**-0.5 (matrices) or 0.1 * randn (vectors), then",
              "embedding_lean": EMBEDDING_LEAN, "action_lean": ACTION_LEAN, "attention_sharpness": ATTENTION_SHARPNESS,
              "stop_lean": stop_lean, "min_margin": MIN_MARGIN}
    description = {
        "set": record.name, "what": "pi0-FAST (lerobot PI0FastPolicy) tiny random-weight model-level record",
        "model_dims": model_dims, "state_names": STATE_NAMES, "seeds": SEEDS, "decoding_recipe": recipe,
        "fast_tokenizer": {"vocab_size": len(fast.bpe_tokenizer), "min_token": fast.min_token, "scale": fast.scale},
        "special_ids": {"bos": tokenizer.bos_token_id, "end_of_action": stop_id,
                        "action_prefix": tokenizer.encode("Action: ", add_special_tokens=False),
                        "paligemma_vocab_size": tokenizer.vocab_size},
        "cases": described, "detokenizer_vectors": vectors,
        "wide_bpe_vectors": {"ids": bpe_ids, "code_points": bpe_code_points,
                             "min_token": wide.min_token, "vocab_size": len(wide.bpe_tokenizer)},
        "generated_by": versions()}
    (record / "cases.json").write_text(json.dumps(description, indent=1) + "\n")
    (record / "README.md").write_text(MODEL_README)

    # the checkpoint and its raw-input cases
    folder = out / "pi0_fast_tiny_checkpoint"
    checkpoint = folder / "checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(checkpoint)
    pre.save_pretrained(checkpoint)
    post.save_pretrained(checkpoint)
    write_tokenizers(checkpoint, paligemma_model, fast)
    arrays, described = {}, []
    for k, case in enumerate(pipeline_inputs):
        batch, model_actions, actions, watch, prompt = run_pipeline_case(policy, pre, post, case)
        assert torch.equal(actions, run_pipeline_case(policy, pre, post, case)[2]), "the reference is not repeatable"
        for camera, image in case["images"].items():
            arrays[f"case{k}_{camera.rsplit('.', 1)[-1]}_uint8"] = image
        arrays[f"case{k}_state_raw"] = case["state"]
        arrays[f"case{k}_state"] = batch["observation.state"][0].numpy()
        arrays[f"case{k}_tokens"] = batch["observation.language.tokens"][0].numpy().astype(np.int64)
        arrays[f"case{k}_token_mask"] = batch["observation.language.attention_mask"][0].numpy()
        arrays[f"case{k}_generated_tokens"] = watch.tokens[0].numpy().astype(np.int64)
        arrays[f"case{k}_model_actions"] = model_actions.numpy()
        arrays[f"case{k}_actions"] = actions.numpy()
        summary = summaries[len(model_inputs) + k]
        described.append({"task": case["task"], "prompt": prompt, "missing_cameras": case["missing_cameras"],
                          "min_margin": min(watch.margins), **summary, "max_abs_action": float(actions.abs().max())})
        print(f"pipeline case{k}: {summary} max|a| {float(actions.abs().max()):.3f}", flush=True)
    np.savez_compressed(folder / "cases.npz", **arrays)
    reloaded = fast_modeling.PI0FastPolicy.from_pretrained(checkpoint).eval()
    assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), reloaded.state_dict().values()))
    description = {
        "set": folder.name, "what": "pi0-FAST (lerobot PI0FastPolicy) tiny random-weight checkpoint in lerobot's "
                                    "save layout, cases from raw robot inputs",
        "model_dims": model_dims, "state_names": STATE_NAMES, "action_names": ACTION_NAMES, "seeds": SEEDS,
        "decoding_recipe": recipe, "cases": described, "generated_by": versions()}
    (folder / "cases.json").write_text(json.dumps(description, indent=1) + "\n")
    (folder / "README.md").write_text(CHECKPOINT_README)
    for path in out.rglob("*"):  # safetensors writes 0600 files
        if path.is_file():
            path.chmod(0o644)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write pi0_fast_tiny/ and pi0_fast_tiny_checkpoint/ into")
    arguments = parser.parse_args()
    for name in ("pi0_fast_tiny", "pi0_fast_tiny_checkpoint"):
        shutil.rmtree(arguments.out / name, ignore_errors=True)
    main(arguments.out)
