"""LingBot-VA's whole policy against lerobot 0.6.1 (test/data/lingbot_va_tiny): instruction cleaning,
T5 tokens and UMT5 embeddings, image resize, the Wan2.2 VAE encoder and its per-episode streams, and
`select_action` from raw camera frames and the task string to the robot command, every step."""

import numpy as np
import pytest
from safetensors.numpy import load_file

from embodied_ros.backbone import umt5, wan_vae
from embodied_ros.kernels import KernelSet
from embodied_ros.models.lingbot_va import closed_loop, policy, prompt
from embodied_ros.sequence.images import resize_bilinear
from lingbot_fixtures import CHECKPOINT, camera_images, frozen_modules, record, transformer

KS = KernelSet("numpy")


@pytest.mark.parametrize("case", [0, 1, 2])
def test_tokens_and_text_embeddings_match_lerobot(case):
    meta, z, _ = record()
    tokenizer, text_cfg, text, _ = frozen_modules()
    spec = meta["cases"][case]
    assert prompt.clean(spec["task"]) == spec["prompt_cleaned"]
    ids, mask = tokenizer(spec["task"])
    np.testing.assert_array_equal(ids, z[f"case{case}_token_ids"])
    np.testing.assert_array_equal(mask, z[f"case{case}_token_mask"])
    assert int(mask.sum()) == spec["n_valid_tokens"]
    assert np.abs(umt5.encode(KS, text_cfg, text, ids, mask) - z[f"case{case}_prompt_embeds"]).max() < 1e-5
    if f"case{case}_negative_token_ids" in z:
        ids, mask = tokenizer("")
        np.testing.assert_array_equal(ids, z[f"case{case}_negative_token_ids"])
        assert np.abs(umt5.encode(KS, text_cfg, text, ids, mask) - z[f"case{case}_negative_prompt_embeds"]).max() < 1e-5


def test_vae_streams_match_lerobot():
    """Step 0 alone, then the keyframe clips fed back before chunks 1 and 2, through one stream per camera."""
    meta, z, config = record()
    _, _, _, vae = frozen_modules()
    height, width = config["height"], config["width"]

    def frames(step):
        return np.stack([resize_bilinear(image.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0),
                                                 height, width) * np.float32(2.0) - np.float32(1.0)
                         for image in camera_images(0, step).values()])

    first = frames(0)
    assert np.abs(first - z["case0_init_frames"]).max() < 1e-6
    streams = [wan_vae.Stream() for _ in range(2)]
    moments = np.stack([vae.moments(first[i][:, None], streams[i])[:, 0] for i in range(2)])
    assert np.abs(moments - z["case0_init_vae_moments"]).max() < 1e-5
    init = np.concatenate([vae.latents(first[i][:, None], wan_vae.Stream()) for i in range(2)], axis=3)
    assert np.abs(init - z["case0_init_latent"]).max() < 1e-5
    for j, chunk in enumerate(meta["cases"][0]["chunks"][1:], start=1):
        clip = np.stack([frames(step) for step in chunk["fed_back_keyframe_steps"]], axis=2)  # cam, 3, T, H, W
        latents = np.concatenate([vae.latents(clip[i], streams[i]) for i in range(2)], axis=3)
        if j == 1:
            latents = np.concatenate([z["case0_init_latent"], latents], axis=1)
        assert np.abs(latents - z[f"case0_chunk{j}_obs_latents"]).max() < 1e-5, j
    with pytest.raises(ValueError, match="multiple of 4"):
        vae.moments(first[0][:, None], streams[0])


def _policy(case):
    meta, z, config = record()
    tokenizer, text_cfg, text, vae = frozen_modules()
    spec = meta["cases"][case]
    chunk = policy.ChunkConfig.from_lerobot(config, guidance_scale=spec["guidance_scale"],
                                            action_guidance_scale=spec["action_guidance_scale"])
    quantiles = load_file(CHECKPOINT / "policy_postprocessor_step_0_unnormalizer_processor.safetensors")
    cfg, weights = transformer()

    def noise(j, video_shape, action_shape):
        return z[f"case{case}_chunk{j}_noise_latents"], z[f"case{case}_chunk{j}_noise_actions"]

    return closed_loop.LingbotVAPolicy(KS, cfg, chunk, weights, prompt.PromptEncoder(KS, tokenizer, text_cfg, text),
                                       vae, config["obs_cam_keys"], (config["height"], config["width"]),
                                       quantiles["action.q01"], quantiles["action.q99"], noise)


@pytest.mark.parametrize("case", [0, 1, 2])
def test_select_action_matches_lerobot_every_step(case):
    meta, z, _ = record()
    spec = meta["cases"][case]
    runner = _policy(case)
    model, final = [], []
    for step in range(spec["n_steps"]):
        action = runner.select_action(camera_images(case, step), spec["task"])
        model.append(action)
        final.append(runner.unnormalize(action))
    assert np.abs(np.array(model) - z[f"case{case}_step_actions_model"]).max() < 1e-4
    assert np.abs(np.array(final) - z[f"case{case}_step_actions"]).max() < 1e-4
    assert runner.episode.index == spec["n_chunks"]


def test_bad_observations_get_a_clear_error():
    runner = _policy(2)
    images = camera_images(2, 0)
    with pytest.raises(ValueError, match="needs an \\(h, w, 3\\) uint8 image"):
        runner.select_action({"observation.images.image": images["observation.images.image"]}, "open the drawer")
    with pytest.raises(ValueError, match="uint8 image"):
        runner.select_action({**images, "observation.images.image": images["observation.images.image"] / 255.0}, "x")
    with pytest.raises(ValueError, match="must be a string"):
        runner.select_action(images, None)
    runner.reset()
    assert runner.select_action(images, "open the drawer").shape == (7,)


def test_vae_decoder_matches_diffusers():
    """test/data/wan_vae_decode: diffusers' AutoencoderKLWan.decode of latents from the tiny record."""
    import json

    from lingbot_fixtures import TINY

    config = json.loads((CHECKPOINT / "vae" / "config.json").read_text())
    decoder = wan_vae.WanVAEDecoder(wan_vae.WanVAEConfig.from_diffusers(config),
                                    load_file(CHECKPOINT / "vae" / "diffusion_pytorch_model.safetensors"))
    with np.load(TINY.parent / "wan_vae_decode" / "cases.npz") as decoded:
        for k in range(3):
            frames = decoder.frames(decoded[f"case{k}_latents"], wan_vae.Stream())
            expected = decoded[f"case{k}_frames"]
            assert frames.shape == expected.shape and np.abs(frames - expected).max() < 1e-4, k
            assert 0.5 > np.mean(np.abs(expected) >= 1.0)  # not a saturated picture
    _, z, _ = record()
    views = decoder.camera_frames(z["case0_chunk1_pred_latents"], 2)
    assert views.shape == (2, 3, 5, 64, 64) and np.isfinite(views).all()
