"""Reference records of BitVLA, made by BitVLA's own PyTorch code (github.com/ustcwhy/BitVLA).

Run in the reference environment of install.sh, never inside embodied_ros:

    HF_HUB_OFFLINE=1 VENV/bin/python gen_records.py OUT --source BITVLA_CHECKOUT

OUT is the repository's test/data folder. Written there:

    bitvla_tiny/                     a model-level record: the checkpoint in the released layout at the
                                     top of the folder, cases.json (settings the checkpoint cannot carry,
                                     versions, tasks, prompts), cases.npz with what the model consumed
                                     (pixel values, token ids, normalized proprio) and what it produced
                                     (normalized and un-normalized actions), taps of case 0
    bitvla_tiny_checkpoint/          checkpoint/ (the same weights, released layout) + cases.json (tasks,
                                     prompts, the settings the checkpoint cannot carry) + cases.npz with raw
                                     inputs (uint8 camera images, raw proprio) and physical actions
    extra/bitvla_<shape>/            a model-level record of other shapes (spec in extra/specs/)

Each case runs BitVLA's evaluation entry point, `experiments.robot.bitnet_utils.get_bitnet_vla_action`
(prompt, image preparation with its TensorFlow resize and center crop, the processor, proprio
normalization, `BitVLAForActionPrediction.predict_action`, un-normalization), on a random-weight model
built from the spec, in float32 with eager attention. `predict_action` is wrapped to record its
inputs and outputs; forward hooks record the taps. A case's random inputs are drawn again until the
case is well conditioned: its actions must not move when float32-sized noise reaches every BitLinear's
activation rounding (`well_conditioned`; README.md says why).

Only the pieces of `prismatic` the evaluation path needs are loaded, by path; the rest of the package
(RLDS datasets, the OpenVLA HF classes, diffusers) is replaced by import-only placeholders.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("USE_TF", "0")  # transformers itself must not import TensorFlow
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = Path(__file__).resolve().parent
MAX_DRAWS = 400
PERTURBED_RUNS = 8
HEAD_STEP = 150000  # the training step in the head and projector file names, as the fine-tuning script writes them
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|eot_id|>", "<|image_pad|>", "<proprio_pad>"]
CORPUS_TASKS = [
    "put the black bowl on the plate", "open the top drawer of the cabinet", "turn on the stove",
    "pick up the alphabet soup and place it in the basket", "push the plate to the front of the stove",
    "put the wine bottle on top of the cabinet", "What action should the robot take to", "close the microwave",
    "stack the red block on the green block", "pick up the ketchup and put it in the basket",
]


# ---- loading BitVLA's code -----------------------------------------------------------------------

def _package(name: str, path: Path | None = None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)] if path is not None else []
    sys.modules[name] = module
    return module


def _placeholder(name: str, **attributes) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module


def _unused(name: str) -> type:
    def refuse(*args, **kwargs):
        raise RuntimeError(f"{name} is a placeholder: the BitVLA evaluation path does not use it")
    return type(name, (), {"__init__": refuse})


def load_bitvla(source: Path, spec: dict):
    """BitVLA's modules with the spec's chunk, action and proprio sizes as its constants."""
    oft = source / "openvla-oft"
    for name in ("prismatic", "prismatic.vla", "prismatic.training", "prismatic.models", "prismatic.extern",
                 "prismatic.extern.hf"):
        _package(name, oft / Path(*name.split(".")))
    for name in ("prismatic.vla.datasets", "prismatic.vla.datasets.rlds", "prismatic.vla.datasets.rlds.utils",
                 "diffusers", "diffusers.schedulers"):
        _package(name)
    _placeholder("diffusers.schedulers.scheduling_ddim", DDIMScheduler=_unused("DDIMScheduler"))
    _placeholder("json_numpy", patch=lambda: None)
    _placeholder("prismatic.extern.hf.configuration_prismatic", OpenVLAConfig=_unused("OpenVLAConfig"))
    _placeholder("prismatic.extern.hf.modeling_prismatic",
                 OpenVLAForActionPrediction=_unused("OpenVLAForActionPrediction"))
    _placeholder("prismatic.extern.hf.processing_prismatic", PrismaticImageProcessor=_unused("PrismaticImageProcessor"),
                 PrismaticProcessor=_unused("PrismaticProcessor"))
    _placeholder("prismatic.models.film_vit_wrapper",
                 FiLMedPrismaticVisionBackbone=_unused("FiLMedPrismaticVisionBackbone"))
    constants = importlib.import_module("prismatic.vla.constants")
    constants.NUM_ACTIONS_CHUNK = spec["num_actions_chunk"]
    constants.ACTION_DIM = spec["action_dim"]
    constants.PROPRIO_DIM = spec["proprio_dim"]
    constants.ACTION_PROPRIO_NORMALIZATION_TYPE = constants.NormalizationType.BOUNDS_Q99
    _placeholder("prismatic.vla.datasets.rlds.utils.data_utils", NormalizationType=constants.NormalizationType)
    sys.path[:0] = [str(oft), str(oft / "bitvla")]
    from bitvla import BitVLAForActionPrediction
    from configuration_bit_vla import Bitvla_Config  # the config class the model class names
    from experiments.robot import bitnet_utils
    from prismatic.models.action_heads import L1RegressionActionHead
    from prismatic.models.projectors import ProprioProjector
    return types.SimpleNamespace(Config=Bitvla_Config, Model=BitVLAForActionPrediction, bitnet_utils=bitnet_utils,
                                 Head=L1RegressionActionHead, Proprio=ProprioProjector, constants=constants)


def chat_template(source: Path) -> str:
    """The chat template BitVLA's checkpoint conversion writes into tokenizer_config.json (read from
    its convert_ckpt.py, not restated here)."""
    tree = ast.parse((source / "openvla-oft" / "convert_ckpt.py").read_text())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
                and isinstance(node.targets[0].slice, ast.Constant) and node.targets[0].slice.value == "chat_template"):
            return node.value.value
    raise RuntimeError("convert_ckpt.py sets no chat_template")


# ---- the model -----------------------------------------------------------------------------------

def make_tokenizer(source: Path, spec: dict):
    """A Llama-3-shaped byte-level BPE tokenizer with a tiny vocabulary, the special tokens BitVLA's
    prompt uses, and BitVLA's chat template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    template = chat_template(source)
    corpus = CORPUS_TASKS + [template] + [case["task"] for case in spec["cases"] + spec["pipeline_cases"]]
    trainer = trainers.BpeTrainer(vocab_size=spec["tokenizer"]["bpe_vocab"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tokenizer.train_from_iterator(corpus * 4, trainer)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    bos = tokenizer.token_to_id("<|begin_of_text|>")
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|begin_of_text|>",
                                   eos_token="<|eot_id|>", pad_token="<|pad|>", model_max_length=2048)
    fast.chat_template = template
    # what BitVLA's action tokenizer adds before fine-tuning (its action tokens are not needed to act)
    fast.add_special_tokens({"additional_special_tokens": ["<|image_pad|>"]})
    fast.add_special_tokens({"additional_special_tokens": ["<proprio_pad>"]})
    return fast


def make_processor(spec: dict, tokenizer, template: str):
    from transformers import LlavaProcessor, SiglipImageProcessor

    size = spec["vision"]["image_size"]
    image_processor = SiglipImageProcessor(size={"height": size, "width": size})
    return LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=spec["vision"]["patch_size"],
                          vision_feature_select_strategy="full", image_token="<|image_pad|>",
                          num_additional_image_tokens=0, chat_template=template)


def make_stats(spec: dict, rng) -> dict:
    import numpy as np

    def bounds(dim: int, mask: list[bool]) -> dict:
        low = rng.uniform(-1.0, 0.2, dim)
        high = low + rng.uniform(0.5, 2.0, dim)
        mean = (low + high) / 2
        return {"mean": mean.tolist(), "std": ((high - low) / 4).tolist(), "max": (high + 0.1).tolist(),
                "min": (low - 0.1).tolist(), "q01": low.tolist(), "q99": high.tolist(), "mask": list(mask)}

    stats = {"action": bounds(spec["action_dim"], spec["action_mask"]),
             "proprio": bounds(spec["proprio_dim"], [True] * spec["proprio_dim"]),
             "num_transitions": 1000, "num_trajectories": 10}
    stats["proprio"]["mask"] = np.ones(spec["proprio_dim"], bool).tolist()
    return {spec["unnorm_key"]: stats}


def build_model(ref, spec: dict, tokenizer, stats: dict):
    import numpy as np
    import torch

    torch.manual_seed(spec["seeds"]["torch_manual_seed"])
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    vision = spec["vision"]
    tokens_per_image = (vision["image_size"] // vision["patch_size"]) ** 2
    text_config = dict(model_type="BitNet", max_position_embeddings=1024, tie_word_embeddings=True,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.convert_tokens_to_ids("<|end_of_text|>"),
                       pad_token_id=tokenizer.pad_token_id, **spec["text"])
    vision_config = dict(model_type="siglip_vision_model", hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
                         vit_weight_quant_method="absmean", vit_act_quant_method="absmax_per_token", **vision)
    config = ref.Config(norm_stats=stats, n_action_bins=256, vision_config=vision_config, text_config=text_config,
                        image_token_index=image_id, projector_hidden_act="gelu", vision_feature_select_strategy="full",
                        vision_feature_layer=spec["vision_feature_layer"], image_seq_length=tokens_per_image,
                        vocab_size=spec["text"]["vocab_size"], pad_token_id=tokenizer.pad_token_id,
                        attn_implementation="eager", architectures=["BitVLAForActionPrediction"])
    config.text_config._attn_implementation = "eager"
    config.vision_config._attn_implementation = "eager"
    model = ref.Model(config)
    width = spec["text"]["hidden_size"]
    head = ref.Head(input_dim=width, hidden_dim=width, action_dim=spec["action_dim"])
    proprio = ref.Proprio(llm_dim=width, proprio_dim=spec["proprio_dim"]) if spec["use_proprio"] else None
    rng = np.random.default_rng(spec["seeds"]["weights"])
    for module in (model, head, proprio):
        if module is not None:
            randomize(module, rng)
    for module in (model, head, proprio):
        if module is not None:
            module.float().eval()
    model.set_constant(image_token_idx=image_id, proprio_pad_idx=tokenizer.convert_tokens_to_ids("<proprio_pad>"),
                       ignore_idx=-100, action_token_begin_idx=tokenizer.convert_tokens_to_ids("<proprio_pad>"),
                       stop_index=tokenizer.convert_tokens_to_ids("<|end_of_text|>"))
    assert type(model.language_model.model.layers[0].self_attn).__name__ == "BitNetAttention"
    return model, head, proprio


def randomize(module, rng) -> None:
    """Weights of moderate size everywhere (the framework's default init leaves a tiny model's
    activations near zero): matrices N(0, 1/fan_in), embeddings N(0, 1), norm scales 1 + N(0, 0.1^2),
    biases N(0, 0.1^2); drawn from a seeded numpy generator in name order."""
    import numpy as np
    import torch

    with torch.no_grad():
        for name, parameter in sorted(module.named_parameters(), key=lambda item: item[0]):
            shape = tuple(parameter.shape)
            if "norm" in name and name.endswith("weight") or name.endswith(("layer_norm1.weight", "layer_norm2.weight")):
                values = 1.0 + 0.1 * rng.standard_normal(shape)
            elif name.endswith("bias"):
                values = 0.1 * rng.standard_normal(shape)
            elif "embed" in name or "position_embedding" in name or name.endswith("probe"):
                values = rng.standard_normal(shape)
            else:
                fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
                values = rng.standard_normal(shape) / np.sqrt(fan_in)
            parameter.copy_(torch.from_numpy(values.astype(np.float32)))


# ---- running cases --------------------------------------------------------------------------------

class Recorder:
    """Wraps the model's predict_action and the tokenizer to keep what one evaluation step consumed."""

    def __init__(self, model, tokenizer) -> None:
        self.calls = []
        self.prompts = []
        original_predict = model.predict_action
        original_template = tokenizer.apply_chat_template

        def predict_action(**kwargs):
            actions, hidden = original_predict(**kwargs)
            self.calls.append({"input_ids": kwargs["input_ids"][0].numpy().copy(),
                               "pixel_values": kwargs["pixel_values"][0].float().numpy().copy(),
                               "proprio": None if kwargs.get("proprio") is None else
                               __import__("numpy").asarray(kwargs["proprio"], dtype="float32").copy(),
                               "actions": actions, "hidden": hidden[0].float().numpy().copy()})
            return actions, hidden

        def apply_chat_template(*args, **kwargs):
            text = original_template(*args, **kwargs)
            self.prompts.append(text)
            return text

        model.predict_action = predict_action
        tokenizer.apply_chat_template = apply_chat_template


def random_observation(rng, spec: dict, case: dict, size: int) -> dict:
    import numpy as np

    observation = {}
    names = ["full_image", "wrist_image"]
    for index in case["images"]:
        # smooth images with some texture, so that resizing and cropping matter
        y, x = np.mgrid[0:size, 0:size] / size
        base = rng.uniform(0, 255, 3)
        slope = rng.uniform(-120, 120, (3, 2))
        noise = rng.normal(0, 25, (size, size, 3))
        image = base + slope[:, 0] * y[..., None] + slope[:, 1] * x[..., None] + noise
        observation[names[index]] = np.clip(np.round(image), 0, 255).astype(np.uint8)
    low, high = -1.5, 1.5
    observation["state"] = rng.uniform(low, high, spec["proprio_dim"]) * case.get("proprio_scale", 1.0)
    return observation


def run_case(ref, model, head, proprio, processor, recorder, spec: dict, observation: dict, task: str):
    import numpy as np
    import torch

    with torch.no_grad():
        actions = ref.bitnet_utils.get_bitnet_vla_action(eval_settings(spec), model, processor, dict(observation), task,
                                                         action_head=head, proprio_projector=proprio)
    call = recorder.calls[-1]
    with torch.no_grad():
        hidden = torch.from_numpy(call["hidden"])[None]
        normalized = head.predict_action(hidden).reshape(spec["num_actions_chunk"], spec["action_dim"])
    return np.stack(actions).astype(np.float64), normalized.numpy().astype(np.float32), call


def eval_settings(spec: dict):
    return types.SimpleNamespace(num_images_in_input=spec["num_images_in_input"], center_crop=spec["center_crop"],
                                 use_proprio=spec["use_proprio"], unnorm_key=spec["unnorm_key"],
                                 num_open_loop_steps=spec["num_actions_chunk"])


class Perturbation:
    """Forward pre-hooks on every BitLinear that, while active, scale its input by (1 + eps * N(0, 1)) per
    element: float32 noise of the size by which two correct float32 implementations differ (a few
    ulps), injected where the int8 rounding of the activations reads it."""

    EPS = 5e-7

    def __init__(self, model) -> None:
        import torch
        from transformers.models.llava.modeling_bitnet import BitLinear as LmBitLinear
        from transformers.models.siglip.modeling_siglip import BitLinear as VisionBitLinear

        self.generator = None

        def perturb(module, inputs):
            if self.generator is None:
                return None
            x = inputs[0]
            noise = torch.randn(x.shape, generator=self.generator, dtype=torch.float64).to(x.dtype)
            return (x * (1 + self.EPS * noise),) + tuple(inputs[1:])

        for module in model.modules():
            if isinstance(module, (LmBitLinear, VisionBitLinear)):
                module.register_forward_pre_hook(perturb)


def well_conditioned(ref, model, head, proprio, perturbation, processor, spec: dict, observation: dict, task: str,
                     actions, seed: int) -> bool:
    """True when PERTURBED_RUNS runs with float32-sized noise at every BitLinear input give the recorded
    actions (to 1e-5): no activation of the case sits so near a rounding tie of its int8 quantization
    that the summation order of a float32 implementation could decide it. A case that fails cannot
    serve as an oracle for another float32 implementation (it would be decided by float rounding);
    it is drawn again."""
    import numpy as np
    import torch

    for run in range(PERTURBED_RUNS):
        perturbation.generator = torch.Generator().manual_seed(seed * 1000 + run)
        try:
            with torch.no_grad():
                again = ref.bitnet_utils.get_bitnet_vla_action(eval_settings(spec), model, processor, dict(observation),
                                                               task, action_head=head, proprio_projector=proprio)
        finally:
            perturbation.generator = None
        if float(np.abs(np.stack(again) - actions).max()) > 1e-5:
            return False
    return True


def stable_case(ref, model, head, proprio, perturbation, processor, recorder, rng, spec: dict, case: dict, size: int):
    """The first draw of the case's random inputs that is well conditioned: (observation, run, draws)."""
    for draw in range(1, MAX_DRAWS + 1):
        observation = random_observation(rng, spec, case, size)
        run = run_case(ref, model, head, proprio, processor, recorder, spec, observation, case["task"])
        if well_conditioned(ref, model, head, proprio, perturbation, processor, spec, observation, case["task"], run[0],
                            draw):
            return observation, run_case(ref, model, head, proprio, processor, recorder, spec, observation,
                                         case["task"]), draw
    raise RuntimeError(f"no well-conditioned draw of {case} in {MAX_DRAWS}")


def taps(model, spec: dict):
    """Forward hooks keeping the connector output and one BitLinear per tower (input, output and the
    reference's own fake-quantized activations and weights)."""
    import torch
    from transformers.models.llava import modeling_bitnet
    from transformers.models.siglip import modeling_siglip

    kept = {}

    def keep(name, quant_module):
        def hook(module, inputs, output):
            x = inputs[0][0].detach()
            kept[f"{name}_input"] = x.numpy().copy()
            kept[f"{name}_output"] = output[0].detach().numpy().copy()
            if quant_module is not None:
                weight = module.weight.detach().float()
                scale = 1.0 / weight.abs().mean().clamp(min=1e-5)
                kept[f"{name}_input_fake_quant"] = quant_module.ActQuant.apply(x.float()).numpy().copy()
                kept[f"{name}_weight_fake_quant"] = quant_module.WeightQuant.apply(weight).numpy().copy()
                kept[f"{name}_weight_ternary"] = (weight * scale).round().clamp(-1, 1).to(torch.int8).numpy().copy()
                kept[f"{name}_weight_scale"] = scale.reshape(1).numpy().copy()
        return hook

    handles = [model.multi_modal_projector.register_forward_hook(
        lambda module, inputs, output: kept.__setitem__("image_features", output.detach().numpy().copy()))]
    handles.append(model.language_model.model.layers[0].self_attn.q_proj.register_forward_hook(
        keep("bitlinear_lm_q", modeling_bitnet)))
    bits = spec["vision"]["vit_weight_bits"] == 1 and spec["vision"]["vit_act_bits"] == 8
    handles.append(model.vision_tower.vision_model.encoder.layers[0].mlp.fc1.register_forward_hook(
        keep("bitlinear_vision_fc1", modeling_siglip if bits else None)))
    return kept, handles


# ---- writing --------------------------------------------------------------------------------------

def save_checkpoint(folder: Path, model, head, proprio, processor, stats: dict) -> None:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    (folder / "dataset_statistics.json").write_text(json.dumps(stats, indent=2))
    # the fine-tuning script saves the DDP-wrapped modules' state dicts (keys start with "module.")
    torch.save({f"module.{k}": v for k, v in head.state_dict().items()},
               folder / f"action_head--{HEAD_STEP}_checkpoint.pt")
    if proprio is not None:
        torch.save({f"module.{k}": v for k, v in proprio.state_dict().items()},
                   folder / f"proprio_projector--{HEAD_STEP}_checkpoint.pt")
    for leftover in folder.glob("generation_config.json"):
        leftover.unlink()


def versions() -> dict:
    import numpy
    import tensorflow
    import tokenizers
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "tensorflow": tensorflow.__version__, "numpy": numpy.__version__, "python": sys.version.split()[0]}


def settings(spec: dict) -> dict:
    """What the checkpoint does not carry, as the evaluation script's config and BitVLA's constants hold it."""
    return {"num_images_in_input": spec["num_images_in_input"], "center_crop": spec["center_crop"],
            "use_proprio": spec["use_proprio"], "unnorm_key": spec["unnorm_key"],
            "chunk_size": spec["num_actions_chunk"],
            "camera_names": ["full_image", "wrist_image"][:spec["num_images_in_input"]]}


def generate(spec_path: Path, out: Path, source: Path, with_pipeline: bool) -> None:
    import numpy as np

    spec = json.loads(spec_path.read_text())
    ref = load_bitvla(source, spec)
    rng_data = np.random.default_rng(spec["seeds"]["data"])
    template = chat_template(source)
    tokenizer = make_tokenizer(source, spec)
    processor = make_processor(spec, tokenizer, template)
    stats = make_stats(spec, np.random.default_rng(spec["seeds"]["weights"] + 1000))
    model, head, proprio = build_model(ref, spec, tokenizer, stats)
    perturbation = Perturbation(model)
    recorder = Recorder(model, processor.tokenizer)
    kept, handles = taps(model, spec)

    model_folder = out / spec["name"]
    save_checkpoint(model_folder, model, head, proprio, processor, stats)
    arrays, described = {}, []
    for k, case in enumerate(spec["cases"]):
        observation, (actions, normalized, call), draws = stable_case(ref, model, head, proprio, perturbation, processor,
                                                                      recorder, rng_data, spec, case, 224)
        again, _, _ = run_case(ref, model, head, proprio, processor, recorder, spec, observation, case["task"])
        assert np.array_equal(actions, again), "the reference is not deterministic"
        arrays[f"case{k}_pixel_values"] = call["pixel_values"]
        arrays[f"case{k}_input_ids"] = call["input_ids"].astype(np.int64)
        if call["proprio"] is not None:
            arrays[f"case{k}_proprio"] = call["proprio"].astype(np.float32)
        arrays[f"case{k}_normalized_actions"] = normalized
        arrays[f"case{k}_actions"] = actions.astype(np.float32)
        if k == 0:
            arrays["case0_action_hidden"] = call["hidden"]
            arrays.update({f"case0_{name}": value for name, value in kept.items()})
        described.append({"task": case["task"], "images": len(case["images"]), "tokens": int(call["input_ids"].size),
                          "draws": draws, "prompt": recorder.prompts[-1]})
    for handle in handles:
        handle.remove()
    np.savez(model_folder / "cases.npz", **arrays)
    record = {"generated_by": "reference/bitvla/gen_records.py", "spec": spec, "versions": versions(),
              "settings": settings(spec), "cases": described,
              "taps": "case0: image_features (connector output, [images, tokens, width]), action_hidden (LM "
                      "hidden states after the final norm at the slots the head reads), bitlinear_lm_q_* (layer 0 "
                      "q_proj) and bitlinear_vision_fc1_* (vision layer 0 fc1): input, output, the reference's "
                      "fake-quantized input and weight, the ternary weight and its scale"}
    (model_folder / "cases.json").write_text(json.dumps(record, indent=1) + "\n")

    if not with_pipeline:
        return
    pipeline_folder = out / f"{spec['name']}_checkpoint"
    save_checkpoint(pipeline_folder / "checkpoint", model, head, proprio, processor, stats)
    arrays, described = {}, []
    names = ["full_image", "wrist_image"]
    for k, case in enumerate(spec["pipeline_cases"]):
        observation, (actions, normalized, call), draws = stable_case(ref, model, head, proprio, perturbation, processor,
                                                                      recorder, rng_data, spec, case, case["raw_size"])
        for name in names:
            if name in observation:
                arrays[f"case{k}_{name}_uint8"] = observation[name]
        arrays[f"case{k}_state_raw"] = np.asarray(observation["state"], np.float64)
        arrays[f"case{k}_tokens"] = call["input_ids"].astype(np.int64)
        arrays[f"case{k}_pixel_values"] = call["pixel_values"]
        arrays[f"case{k}_normalized_actions"] = normalized
        arrays[f"case{k}_actions"] = actions.astype(np.float32)
        described.append({"task": case["task"], "draws": draws, "prompt": recorder.prompts[-1]})
    np.savez(pipeline_folder / "cases.npz", **arrays)
    notes = {"generated_by": "reference/bitvla/gen_records.py", "versions": versions(), "settings": settings(spec),
             "action_period_s": 0.05, "cases": described}
    (pipeline_folder / "cases.json").write_text(json.dumps(notes, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the repository's test/data folder")
    parser.add_argument("--source", type=Path, default=os.environ.get("BITVLA_SOURCE"),
                        help="BitVLA checkout (default: $BITVLA_SOURCE)")
    parser.add_argument("--spec", type=Path, help="run one spec only (internal: each spec runs in its own process, "
                                                  "since BitVLA's sizes are module constants)")
    parser.add_argument("--pipeline", action="store_true", help="with --spec: also write the checkpoint record")
    args = parser.parse_args()
    if args.source is None:
        parser.error("give the BitVLA checkout with --source or BITVLA_SOURCE")
    if args.spec is not None:
        destination = args.out / "extra" if args.spec.parent.name == "specs" and args.spec.parent.parent.name == "extra" \
            else args.out
        generate(args.spec, destination, args.source.resolve(), args.pipeline)
        return
    jobs = [(HERE / "specs" / "bitvla_tiny.json", True)]
    jobs += [(path, False) for path in sorted((args.out / "extra" / "specs").glob("bitvla_*.json"))]
    for spec, pipeline in jobs:
        command = [sys.executable, __file__, str(args.out), "--source", str(args.source), "--spec", str(spec)]
        subprocess.run(command + (["--pipeline"] if pipeline else []), check=True)
        print(f"made {spec.stem}")


if __name__ == "__main__":
    main()
