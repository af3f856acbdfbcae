"""pi0-FAST (LeRobot PI0FastPolicy): PaliGemma writing its action chunk as text, without PyTorch.

The first family whose head is autoregressive. There is no action expert and no noise: the PaliGemma
LM reads [images, prompt, bos] once (bidirectionally, as pi0's prefix) and then generates tokens one at
a time, each the argmax of the LM head over its last hidden state, until "|" or max_decoding_steps.
The tokens spell a chunk in FAST (heads/fast_tokens.py): PaliGemma id p is FAST token
vocab_size - 1 - fast_skip_tokens - p, the FAST tokens are byte-level BPE over characters that stand
for quantized DCT coefficients, and an inverse DCT per action column gives the chunk.

Stages: `encode` runs SigLIP; `build_prefix` writes the prompt ("Task: ..., State: <256 bins of the
normalized state>;\n"), runs the LM over the prefix into a sealed cache of every layer and keeps bos's
hidden state; `act` decodes over that cache, keeping its own tokens' keys and values apart, so that
the cache serves the next act on the same prefix unchanged; the chunk is de-normalized (MEAN_STD by
default). Greedy decoding is deterministic: the spec's noise shape is (0,), and real-time chunking,
which steers a flow solve, does not apply (`real_time_chunking=False`; config/pi0_fast.yaml leaves
`rtc` off). A sequence LeRobot could not decode gives its zeros; the chunk says so (`runtime.Pi0FastChunk`).

Files: config.py (dimensions, decoding settings, the tokenizers' ids and the FAST table), weights.py,
convert.py, tokens.py (prompt, ids, detokenization), model.py, runtime.py, parity.py (records).
"""

from embodied_ros.models.pi0_fast.parity import bench_cases, recognizes_fixture, run_fixture_parity, verify_reference
from embodied_ros.models.pi0_fast.runtime import Pi0FastChunk, Pi0FastRuntime, load_runtime, spec_of

__all__ = ["Pi0FastChunk", "Pi0FastRuntime", "load_runtime", "spec_of", "recognizes_fixture", "run_fixture_parity",
           "verify_reference", "bench_cases"]
