"""The reference records of other shapes (test/data/extra) are complete and agree with themselves:
every array has the shape its config.json implies, every tensor the shape its dimensions imply,
every spec produced the folder next to it. The runtime's parity against them is tested elsewhere."""
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from embodied_ros.bundle.families import known_families

EXTRA = Path(__file__).parent / "data" / "extra"
SETS = sorted(p.name for p in EXTRA.iterdir() if p.is_dir() and p.name != "specs")
KINDS = [*known_families(), "wan_block"]  # a set is named after its family (or the Wan block) first


def kind(name: str) -> str | None:
    """The longest kind the set's name starts with ("pi0_fast_x" is pi0_fast's, not pi0's)."""
    named = [k for k in KINDS if name.startswith(k + "_")]
    return max(named, key=len) if named else None


def sets_of(kind_name: str, rtc: bool = False) -> list[str]:
    return [name for name in SETS if kind(name) == kind_name and ("_rtc_" in name) == rtc]


PI05_SETS, PI0_SETS, WAN_SETS = sets_of("pi05"), sets_of("pi0"), sets_of("wan_block")
RTC_SETS = [name for name in SETS if "_rtc_" in name]  # real-time chunking (docs/reference.md)
SMOLVLA_SETS, GROOT_SETS = sets_of("smolvla"), sets_of("groot")
LINGBOT_SETS = sets_of("lingbot_va")  # a whole policy each: VAE, UMT5, transformer
MAX_SET_BYTES = 2 * 2**20
MAX_WHOLE_POLICY_SET_BYTES = 6 * 2**20
MAX_RTC_SET_BYTES = 3 * 2**20  # 17 cases, each with its observation's images

PI05_CONFIG_KEYS = ["vision", "projector", "language_model", "expert", "chunk_size", "max_action_dim",
                    "max_state_dim", "action_dim", "state_dim", "num_inference_steps", "tokenizer_max_length",
                    "prefix_len", "time_embedding", "attention_mask_value", "camera_names", "cases",
                    "max_abs_actions", "determinism", "generated_by", "seed", "weight_init"]
WAN_CONFIG_KEYS = ["dim", "ffn_dim", "num_heads", "head_dim", "eps", "qk_norm", "cross_attn_norm", "grid_fhw",
                   "seq_len", "token_order", "patch_size_assumption", "latent_shape_for_rope", "text_len",
                   "rotary", "temb_formats"]
LM = "model.paligemma_with_expert.paligemma.model.language_model."
EXPERT = "model.paligemma_with_expert.gemma_expert.model."
VISION = "model.paligemma_with_expert.paligemma.model.vision_tower.vision_model."


def load_set(name, weights_file):
    folder = EXTRA / name
    config = json.loads((folder / "config.json").read_text())
    with np.load(folder / "cases.npz") as npz:
        cases = {k: npz[k] for k in npz.files}
    with safe_open(str(folder / weights_file), "np") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    return config, cases, shapes, dtypes


def test_every_set_and_spec_is_present_and_small():
    assert [name for name in SETS if kind(name) is None] == []
    assert all(len(sets) >= 1 for sets in (PI05_SETS, PI0_SETS, WAN_SETS, RTC_SETS, SMOLVLA_SETS, GROOT_SETS,
                                           LINGBOT_SETS))
    specs = sorted(p.stem for p in (EXTRA / "specs").glob("*.json"))
    assert specs == SETS
    for name in SETS:
        size = sum(f.stat().st_size for f in (EXTRA / name).rglob("*") if f.is_file())
        limit = {**dict.fromkeys(LINGBOT_SETS, MAX_WHOLE_POLICY_SET_BYTES),
                 **dict.fromkeys(RTC_SETS, MAX_RTC_SET_BYTES)}.get(name, MAX_SET_BYTES)
        assert size < limit, f"{name} is {size} bytes"


@pytest.mark.parametrize("name", PI05_SETS + PI0_SETS)
def test_pi05_config_matches_its_spec(name):
    config, _, _, _ = load_set(name, "model.safetensors")
    spec = json.loads((EXTRA / "specs" / f"{name}.json").read_text())
    assert [k for k in PI05_CONFIG_KEYS if k not in config] == []
    assert config["set"] == spec["name"] == name
    assert config["n_cameras"] == len(config["camera_names"]) == spec["n_cameras"]
    for section, spec_key in (("language_model", "lm"), ("expert", "expert")):
        for field in ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim"):
            assert config[section][field] == spec[spec_key][field], (section, field)
    for field in ("width", "depth", "mlp_dim", "num_heads"):
        assert config["vision"][field] == spec["vision"][field]
    for field in ("chunk_size", "action_dim", "max_action_dim", "num_inference_steps", "tokenizer_max_length"):
        assert config[field] == spec[field], field
    assert [c["valid_tokens"] for c in config["cases"]] == [c["valid_tokens"] for c in spec["cases"]]
    assert config["determinism"]["two_runs_bit_identical_all_cases"] is True


@pytest.mark.parametrize("name", PI05_SETS)
def test_pi05_weights_have_the_configured_shapes(name):
    config, _, shapes, dtypes = load_set(name, "model.safetensors")
    vis, lm, ex = config["vision"], config["language_model"], config["expert"]
    attn, kv = lm["num_heads"] * lm["head_dim"], lm["num_kv_heads"] * lm["head_dim"]
    expected = {
        VISION + "embeddings.patch_embedding.weight": (vis["width"], 3, vis["patch_size"], vis["patch_size"]),
        VISION + "embeddings.position_embedding.weight": (vis["tokens_per_camera"], vis["width"]),
        VISION + f"encoder.layers.{vis['depth'] - 1}.mlp.fc1.weight": (vis["mlp_dim"], vis["width"]),
        "model.paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight": (lm["width"], vis["width"]),
        LM + "embed_tokens.weight": (lm["vocab_size"], lm["width"]),
        LM + f"layers.{lm['depth'] - 1}.self_attn.q_proj.weight": (attn, lm["width"]),
        LM + "layers.0.self_attn.k_proj.weight": (kv, lm["width"]),
        LM + "layers.0.mlp.gate_proj.weight": (lm["mlp_dim"], lm["width"]),
        EXPERT + f"layers.{ex['depth'] - 1}.self_attn.o_proj.weight": (ex["width"], attn),
        EXPERT + "layers.0.self_attn.v_proj.weight": (kv, ex["width"]),
        EXPERT + "layers.0.input_layernorm.dense.weight": (3 * ex["width"], ex["width"]),
        EXPERT + "norm.dense.weight": (3 * ex["width"], ex["width"]),
        "model.action_in_proj.weight": (ex["width"], config["max_action_dim"]),
        "model.action_out_proj.weight": (config["max_action_dim"], ex["width"]),
        "model.time_mlp_in.weight": (ex["width"], ex["width"]),
    }
    for key, shape in expected.items():
        assert shapes.get(key) == shape, key
    assert sum(k.startswith(VISION + "encoder.layers.") and k.endswith("fc1.weight") for k in shapes) == vis["depth"]
    assert sum(k.startswith(LM + "layers.") and k.endswith("q_proj.weight") for k in shapes) == lm["depth"]
    assert sum(k.startswith(EXPERT + "layers.") and k.endswith("q_proj.weight") for k in shapes) == ex["depth"]
    assert dtypes == ({"F16"} if config["weights_dtype"].startswith("float16") else {"F32"})


@pytest.mark.parametrize("name", PI05_SETS + PI0_SETS)
def test_pi05_cases_have_the_configured_shapes(name):
    config, cases, _, _ = load_set(name, "model.safetensors")
    vis, lm = config["vision"], config["language_model"]
    n_cam, size, chunk, length = config["n_cameras"], vis["image_size"], config["chunk_size"], config["tokenizer_max_length"]
    assert config["prefix_len"] == n_cam * vis["tokens_per_camera"] + length
    assert vis["tokens_per_camera"] == (size // vis["patch_size"]) ** 2
    per_case = {"images": ((n_cam, 3, size, size), np.float32), "image_masks": ((n_cam,), np.bool_),
                "tokens": ((length,), np.int64), "token_mask": ((length,), np.bool_),
                "noise": ((chunk, config["max_action_dim"]), np.float32),
                "actions": ((chunk, config["action_dim"]), np.float32)}
    n_cases = len(config["cases"])
    assert sum(k.endswith("_actions") for k in cases) == n_cases
    for k, case in enumerate(config["cases"]):
        for array, (shape, dtype) in per_case.items():
            value = cases[f"case{k}_{array}"]
            assert value.shape == shape and value.dtype == dtype, (k, array, value.shape, value.dtype)
        mask, valid = cases[f"case{k}_token_mask"], case["valid_tokens"]
        assert mask[:valid].all() and not mask[valid:].any()
        assert (cases[f"case{k}_tokens"][valid:] == 0).all()
        present = cases[f"case{k}_image_masks"]
        assert present.sum() == n_cam - len(case["missing_cameras"])
        assert list(present) == sorted(present, reverse=True), "present cameras come first"
        assert sorted(case["model_camera_order"]) == sorted(config["camera_names"])
        assert [n for n, p in zip(case["model_camera_order"], present) if not p] == case["missing_cameras"]
        assert (cases[f"case{k}_images"][~present] == 0).all()
        assert case["max_abs_action"] == pytest.approx(float(np.abs(cases[f"case{k}_actions"]).max()))
    assert config["cases"][0]["missing_cameras"] == []
    kv_shape = (1, lm["num_kv_heads"], config["prefix_len"], lm["head_dim"])
    taps = {"case0_image_embeddings": (n_cam * vis["tokens_per_camera"], lm["width"]),
            "case0_prefix_hidden": (config["prefix_len"], lm["width"]),
            "case0_prefix_pad_mask": (config["prefix_len"],),
            "case0_prefix_k_layer0": kv_shape, "case0_prefix_v_layer0": kv_shape,
            "case0_prefix_k_layerLAST": kv_shape, "case0_prefix_v_layerLAST": kv_shape,
            "case0_velocity_step0": (chunk, config["max_action_dim"])}
    for tap, shape in taps.items():
        assert cases[tap].shape == shape, tap
    pad = np.concatenate([np.repeat(cases["case0_image_masks"], vis["tokens_per_camera"]), cases["case0_token_mask"]])
    assert (cases["case0_prefix_pad_mask"] == pad).all()


@pytest.mark.parametrize("name", WAN_SETS)
def test_wan_block_set_is_consistent(name):
    config, cases, shapes, dtypes = load_set(name, "block.safetensors")
    spec = json.loads((EXTRA / "specs" / f"{name}.json").read_text())
    assert [k for k in WAN_CONFIG_KEYS if k not in config] == []
    dim, ffn, heads, text = spec["dim"], spec["ffn_dim"], spec["num_heads"], spec["text_len"]
    assert (config["dim"], config["ffn_dim"], config["num_heads"], config["text_len"]) == (dim, ffn, heads, text)
    assert config["grid_fhw"] == spec["grid"] and config["seq_len"] == int(np.prod(spec["grid"]))
    head_dim, seq = dim // heads, config["seq_len"]
    assert config["head_dim"] == head_dim
    for key, shape in {"scale_shift_table": (1, 6, dim), "attn1.to_q.weight": (dim, dim),
                       "attn2.to_k.weight": (dim, dim), "attn1.norm_q.weight": (dim,),
                       "norm2.weight": (dim,), "ffn.net.0.proj.weight": (ffn, dim),
                       "ffn.net.2.weight": (dim, ffn)}.items():
        assert shapes[key] == shape, key
    assert dtypes == {"F32"}
    for k, temb_shape in ((0, (1, seq, 6, dim)), (1, (1, 6, dim))):
        assert cases[f"case{k}_hidden_states"].shape == (1, seq, dim)
        assert cases[f"case{k}_encoder_hidden_states"].shape == (1, text, dim)
        assert cases[f"case{k}_temb"].shape == temb_shape
        assert cases[f"case{k}_output"].shape == (1, seq, dim)
        assert cases[f"case{k}_rotary_cos"].shape == cases[f"case{k}_rotary_sin"].shape == (1, seq, 1, head_dim)


@pytest.mark.parametrize("name", WAN_SETS)
def test_wan_rotary_tables_follow_the_three_axis_rule(name):
    """cos/sin rebuilt from the grid and the split [hd - 4*(hd//6), 2*(hd//6), 2*(hd//6)]."""
    config, cases, _, _ = load_set(name, "block.safetensors")
    head_dim, (frames, height, width) = config["head_dim"], config["grid_fhw"]
    split = [head_dim - 4 * (head_dim // 6), 2 * (head_dim // 6), 2 * (head_dim // 6)]
    assert config["rotary"]["split_t_h_w"] == split
    f, h, w = np.meshgrid(np.arange(frames), np.arange(height), np.arange(width), indexing="ij")
    angles = np.concatenate([pos.reshape(-1, 1) * 10000.0 ** (-np.arange(0, d, 2) / d)
                             for pos, d in zip((f, h, w), split)], axis=1)  # [S, head_dim / 2]
    angles = np.repeat(angles, 2, axis=1)  # each angle drives one adjacent channel pair
    np.testing.assert_allclose(cases["case0_rotary_cos"][0, :, 0], np.cos(angles), atol=1e-6)
    np.testing.assert_allclose(cases["case0_rotary_sin"][0, :, 0], np.sin(angles), atol=1e-6)


@pytest.mark.parametrize("name", RTC_SETS)
def test_rtc_set_matches_its_spec_and_its_arrays_their_cases(name):
    config, cases, _, _ = load_set(name, "model.safetensors")
    spec = json.loads((EXTRA / "specs" / f"{name}.json").read_text())
    for field in ("chunk_size", "action_dim", "max_action_dim", "num_inference_steps"):
        assert config[field] == spec[field], field
    chain = spec["chain"]
    names = [c["name"] for c in spec["cases"]] + [f"{chain['name']}{j}" for j in range(len(chain["obs"]))]
    assert [c["name"] for c in config["cases"]] == names
    steps, chunk, width = spec["num_inference_steps"], spec["chunk_size"], spec["max_action_dim"]
    for k, case in enumerate(config["cases"]):
        assert cases[f"case{k}_x_steps"].shape == (steps + 1, chunk, width)
        assert cases[f"case{k}_actions"].shape == cases[f"case{k}_actions_plain"].shape == (chunk, spec["action_dim"])
        leftover = case["prev_chunk_left_over"]
        assert (f"case{k}_prev_chunk_left_over" in cases) == (leftover is not None)
        if leftover is not None:
            assert list(cases[f"case{k}_prev_chunk_left_over"].shape) == leftover["shape"]
        if case["expect"] == "plain":
            np.testing.assert_array_equal(cases[f"case{k}_actions"], cases[f"case{k}_actions_plain"])


@pytest.mark.parametrize("name", SMOLVLA_SETS)
def test_smolvla_config_matches_its_spec(name):
    config, cases, shapes, _ = load_set(name, "model.safetensors")
    spec = json.loads((EXTRA / "specs" / f"{name}.json").read_text())
    assert config["set"] == spec["name"] == name
    text, vision = config["text_model"], config["vision"]
    for field in ("width", "mlp_dim", "num_heads", "num_kv_heads", "head_dim"):
        assert text[field] == spec["text"][field], field
    assert config["num_vlm_layers"] == spec["num_vlm_layers"] < text["depth"]
    kept = {int(k.split(".")[6]) for k in shapes if ".text_model.layers." in k}
    assert kept == set(range(config["num_vlm_layers"]))  # the dropped layers are not in the file
    assert config["connector"]["scale_factor"] == spec["scale_factor"] and vision["width"] == spec["vision"]["width"]
    for k, case in enumerate(config["cases"]):
        slots = len(case["model_image_slots"])
        assert cases[f"case{k}_images"].shape == (slots, 3, spec["image_size"], spec["image_size"])
        assert case["prefix_len"] == slots * config["connector"]["tokens_per_image"] + spec["tokenizer_max_length"] + 1
    assert config["determinism"]["two_runs_bit_identical_all_cases"] is True


@pytest.mark.parametrize("name", GROOT_SETS)
def test_groot_config_and_weights_match_its_spec(name):
    config, cases, shapes, _ = load_set(name, "model.safetensors")
    spec = json.loads((EXTRA / "specs" / f"{name}.json").read_text())
    assert config["set"] == spec["name"] == name and config["select_layer"] == spec["select_layer"]
    text, vision = config["text_model"], config["vision"]
    for field in ("width", "mlp_dim", "num_heads", "num_kv_heads", "head_dim", "mrope_section"):
        assert text[field] == spec["text"][field], field
    for field in ("width", "depth", "mlp_dim", "num_heads", "patch_size", "deepstack_visual_indexes"):
        assert vision[field] == spec["vision"][field], field
    lm = "_groot_model.backbone.model.model.language_model."
    assert shapes[lm + "layers.0.self_attn.k_proj.weight"] == (text["num_kv_heads"] * text["head_dim"], text["width"])
    assert not any(k.startswith(lm + f"layers.{spec['select_layer']}.") for k in shapes)
    horizon, max_action = spec["action_head"]["action_horizon"], spec["action_head"]["max_action_dim"]
    for k, case in enumerate(spec["cases"]):
        assert cases[f"case{k}_noise"].shape == (horizon, max_action)
        assert cases[f"case{k}_actions"].shape == (horizon, spec["action_dim"])
        assert cases[f"case{k}_image_grid_thw"].shape == (len(case["views"]), 3)
