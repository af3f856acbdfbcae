"""Decoder record of the Wan2.2 VAE in test/data/lingbot_va_tiny: diffusers `AutoencoderKLWan.decode`
(0.42.1, float32, CPU) of latents taken from that record, per camera.

    $EMBODIED_ROS_REF_PYTHON test/data/wan_vae_decode/make_record.py   (from the repository root; reference/install.sh)

Writes cases.npz next to this file: `case{k}_latents` (48, T, h, w) raw latents (= normalized
latents * latents_std + latents_mean, float32) and `case{k}_frames` (3, 1 + 4 (T - 1), 16h, 16w) the
decoded, clamped frames. Case 0: case 0's chunk-1 observed latents, camera 0 (2 frames); case 1: its
chunk-2 predicted latents, camera 1 (2 frames); case 2: case 1's init latent + chunk-1 observed latents,
camera 0 (3 frames). Each case is one decode call.
"""

from pathlib import Path

import numpy as np
import torch
from diffusers import AutoencoderKLWan

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "lingbot_va_tiny"

torch.set_num_threads(1)
vae = AutoencoderKLWan.from_pretrained(TINY / "checkpoint" / "vae", torch_dtype=torch.float32).eval()
mean = np.asarray(vae.config.latents_mean, np.float32)[:, None, None, None]
std = np.asarray(vae.config.latents_std, np.float32)[:, None, None, None]
z = np.load(TINY / "cases.npz")
sources = [z["case0_chunk1_obs_latents"][..., :4], z["case0_chunk2_pred_latents"][..., 4:],
           np.concatenate([z["case1_init_latent"], z["case1_chunk1_obs_latents"]], axis=1)[..., :4]]
out = {}
for k, normalized in enumerate(sources):
    latents = (normalized * std + mean).astype(np.float32)
    with torch.no_grad():
        frames = vae.decode(torch.from_numpy(latents)[None]).sample[0].numpy()
    out[f"case{k}_latents"], out[f"case{k}_frames"] = latents, frames
    print(k, latents.shape, frames.shape, float(np.abs(frames).max()))
np.savez(HERE / "cases.npz", **out)
