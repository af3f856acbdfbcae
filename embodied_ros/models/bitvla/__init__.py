"""BitVLA (github.com/ustcwhy/BitVLA): a 1.58-bit VLA, without PyTorch. A LLaVA-style model, SigLIP
(its linears BitLinear: ternary weights, int8 activations) -> GELU connector -> BitNet b1.58 2B4T,
fine-tuned with OpenVLA-OFT: the whole action chunk decoded in one bidirectional LM pass over
chunk x action_dim placeholder tokens, read by an L1-regression MLP head, un-normalized with the
dataset's q01/q99 bounds.

The family entry points of models/__init__.py. Where the stages split (runtime.py):

- encode runs the vision tower and connector per present camera (perception may run less often).
- build_prefix runs the whole LM pass. BitVLA has no per-step solver and no noise: every token,
  the prompt's included, attends to the action placeholders and they to it, so nothing before the
  placeholders can be cached apart from them, and the pass is a function of the observation alone.
  Doing it once per observation in the prefix stage leaves `act` (called every step) the head and the
  un-normalization: 0.2 ms on the tiny bundle, ~15 ms at the released size (the head's first layer reads
  7 x 2560 values per step), where the LM pass takes seconds (benchmarks/bench_bitvla.py).
- act ignores the noise it is handed; real_time_chunking is False, since a regression from one pass
  has no solver steps a leftover chunk could guide.

BitLinear products run on the integer units (ternary weights x int8 activations, integer sums;
kernels/cpu/ternary_gemm.py) or, for parity, in the reference's float arithmetic
(`products="float"`); the bundle stores BitLinear weights ternary (TQ2_0) in both cases.
"""

from embodied_ros.models.bitvla.parity import RECORDS
from embodied_ros.models.bitvla.runtime import BitVLARuntime, load_runtime, spec_of

recognizes_fixture, run_fixture_parity, verify_reference, bench_cases = (
    RECORDS.recognizes_fixture, RECORDS.run_fixture_parity, RECORDS.verify_reference, RECORDS.bench_cases)

__all__ = ["BitVLARuntime", "load_runtime", "spec_of", "RECORDS", "recognizes_fixture", "run_fixture_parity",
           "verify_reference", "bench_cases"]
