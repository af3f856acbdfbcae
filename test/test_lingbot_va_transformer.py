"""LingBot-VA's dual-stream transformer and chunk loop against lerobot 0.6.1 (test/data/lingbot_va_tiny):
schedules, RoPE grid ids, time conditioning, the KV slot pool (fill, release, eviction), guidance,
chunk-0 rules and executed-action feedback, closing the loop over every chunk on its own outputs."""

from functools import lru_cache

import numpy as np
import pytest

from embodied_ros.heads import dual_stream as ds
from embodied_ros.models.lingbot_va import policy as pl
from lingbot_fixtures import EXTRA, TINY, episode, record

TOLERANCE = 1e-4


def test_schedules_are_lerobots_float32_tables():
    _, z, config = record()
    video = ds.flow_schedule(config["num_inference_steps"], config["snr_shift"])
    action = ds.flow_schedule(config["action_num_inference_steps"], config["action_snr_shift"])
    for mine, name in ((video.sigmas, "video_sigmas"), (video.timesteps, "video_timesteps"),
                       (action.sigmas, "action_sigmas"), (action.timesteps, "action_timesteps")):
        np.testing.assert_array_equal(mine, z[f"sched_{name}"])
    # a float64 table gives the transformer other timesteps (909.0909... instead of 909.09088)
    assert abs(float(video.timesteps[1]) - 1000 * 5 * (2 / 3) / (1 + 4 * (2 / 3))) > 1e-5


def test_linspace_is_torchs():
    """torch.linspace(1, 0, n) in float32 from torch 2.13 (AVX-512 CPU), n = 2..60: the released
    schedules have 21 (video) and 51 (action) points."""
    with np.load(TINY.parent / "torch_linspace.npz") as torch_values:
        for n in range(2, 61):
            np.testing.assert_array_equal(ds.linspace_float32(1.0, 0.0, n), torch_values[f"points{n}"], err_msg=str(n))


@lru_cache(maxsize=None)
def _run_case(case, taps_wanted=True, folder=TINY):
    meta, z, _ = record(folder)
    spec = meta["cases"][case]
    ep = episode(case, folder)
    errors, taps, rows = {}, [], []
    for j in range(spec["n_chunks"]):
        prefix = f"case{case}_chunk{j}_"
        if j:
            ep.feed_back(z[prefix + "obs_latents"])
        chunk_record, chunk_taps = pl.ChunkRecord(), {} if taps_wanted else None
        predicted, actions = ep.sample(z[prefix + "noise_latents"], z[prefix + "noise_actions"],
                                       z[f"case{case}_init_latent"] if j == 0 else None, chunk_record, chunk_taps)
        for name, mine in (("video_x", np.stack(chunk_record.video_x)), ("video_v", np.stack(chunk_record.video_v)),
                           ("action_x", np.stack(chunk_record.action_x)),
                           ("action_v", np.stack(chunk_record.action_v)),
                           ("pred_latents", predicted), ("actions_full", actions)):
            assert mine.shape == z[prefix + name].shape, name
            errors[f"chunk{j}.{name}"] = float(np.abs(mine - z[prefix + name]).max())
        taps.append(chunk_taps)
        rows.append(ep.executed_rows(actions, j))
    return ep, errors, taps, np.concatenate(rows)[:spec["n_steps"]]


@pytest.mark.parametrize("folder, case", [(TINY, 0), (TINY, 1), (TINY, 2), *((p, 0) for p in EXTRA)],
                         ids=lambda v: getattr(v, "name", v))
def test_chunks_match_lerobot(folder, case):
    meta, z, _ = record(folder)
    ep, errors, _, steps = _run_case(case, True, folder)
    errors["step_actions_model"] = float(np.abs(steps - z[f"case{case}_step_actions_model"]).max())
    final = pl.unnormalize_quantiles(steps, meta["action_q01"], meta["action_q99"])
    errors["step_actions"] = float(np.abs(final - z[f"case{case}_step_actions"]).max())
    assert max(errors.values()) < TOLERANCE, errors
    # the pool attended exactly the keys lerobot's log lists, call after call (fills, releases, eviction)
    assert ep.pool.keys_attended == [call["keys"] for call in meta["cases"][case]["transformer_calls"]]


def test_transformer_taps_match_lerobot():
    _, z, _ = record()
    _, _, taps, _ = _run_case(0, True, TINY)
    np.testing.assert_array_equal(taps[1]["video"]["grid"], z["case0_tap_grid_video_c1"][:3].T)
    np.testing.assert_array_equal(taps[1]["action"]["grid"], z["case0_tap_grid_action_c1"][:3].T)
    checks = [(taps[0]["video"]["timestep_proj"], "case0_tap_video_timestep_proj_c0s0"),
              (taps[1]["action"]["timestep_proj"], "case0_tap_action_timestep_proj_c1s0")]
    for j in range(3):
        for stream in ("video", "action"):
            name = f"case0_tap_block0_{stream}_c{j}s0"
            if name in z:
                checks.append((np.stack(taps[j][stream]["block0"]), name))
    assert len(checks) == 7
    for mine, name in checks:
        assert np.abs(mine - z[name]).max() < 1e-5, name


def test_eviction_releases_the_oldest_entry_for_good():
    pool = ds.SlotPool(slots=6, rows=1, layers=1, heads=1, head_dim=2)
    first = pool.reserve(3)
    pool.commit(first, ds.OBSERVED)
    second = pool.reserve(3)
    pool.commit(second, ds.PREDICTED)
    temporary = pool.reserve(3)  # no free slot: the oldest entry (id 0) goes, even for a temporary write
    assert set(temporary) == set(first)
    pool.occupy(temporary)
    pool.release(temporary)
    pool.commit(temporary, ds.TEMPORARY)
    assert set(pool.occupied()) == set(second)
    pool.release_predicted()
    assert not len(pool.occupied())


def test_bad_inputs_are_refused_with_a_clear_error():
    ep = episode(2)
    _, z, _ = record()
    with pytest.raises(ValueError, match="feedback before any chunk"):
        ep.feed_back(z["case2_chunk1_obs_latents"])
    with pytest.raises(ValueError, match="chunk 0 needs the observed latent frame"):
        ep.sample(z["case2_chunk0_noise_latents"], z["case2_chunk0_noise_actions"])
    with pytest.raises(ValueError, match="noise"):
        ep.sample(z["case2_chunk0_noise_latents"][:, :1], z["case2_chunk0_noise_actions"], z["case2_init_latent"])
    with pytest.raises(ValueError, match="RoPE pairs"):
        ds.DualStreamConfig(dim=64, num_heads=4, ffn_dim=32, num_layers=1, freq_dim=8, text_dim=8, action_dim=2)
