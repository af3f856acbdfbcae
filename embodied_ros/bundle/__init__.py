"""The model bundle: one GGUF file holding everything a model family needs to run.

Writing and reading
-------------------
    from embodied_ros.bundle import BundleWriter, ReferenceRecord, RobotMetadata, open_bundle

    writer = BundleWriter("pi05", quant_plan="lm=q8_0,expert=q4_k")   # plan: see bundle/plan.py
    writer.set_config({"vision": {"width": 1152, "depth": 27}, "chunk_size": 50})
    writer.add_weights({"vision.layers.0.attn.q.weight": w, ...})    # float arrays or QuantTensors
    writer.set_stats({"state": {"q01": lo, "q99": hi}, "action": {"mean": m, "std": s}})
    writer.set_tokenizer(open("tokenizer.model", "rb").read())
    writer.set_solver({"method": "euler", "num_inference_steps": 10})
    writer.set_robot(RobotMetadata(state_names, action_names, action_period_s=0.02))
    writer.set_reference(ReferenceRecord(inputs={...}, noise={...}, expected={...}, tolerance=1e-4,
                                         fields={"task": "pick up the cube"}))
    writer.write("policy.gguf", progress=True)

    bundle = open_bundle("policy.gguf", architecture="pi05")  # checks structure + digest
    bundle.config["vision"]["width"]; bundle.solver; bundle.robot; bundle.stats["state"]["q01"]
    w = bundle.weight("vision.layers.0.attn.q.weight")        # f32 view, or QuantTensor
    y = ks.linear(x, w, b)                                    # any weight type, one call

`bundle.weight(name)` gives what `ks.linear` takes: F32 tensors are read-only views of the
memory-mapped file (no copy); Q8_0 and Q4_K tensors are `QuantTensor`s over views of the file,
dequantized block by block inside the kernels; F16 and BF16 tensors are upcast to float32 once, on
first use, and kept (these types shrink the file; at run time BLAS wants float32). `bundle.raw(name)`
gives any tensor as stored.

File layout (format version 1)
------------------------------
A GGUF v3 file, little-endian, default 32-byte alignment. Metadata keys:

  general.architecture            str    model family = package embodied_ros.models.<architecture>
  embodied_ros.format_version     u32    1; readers refuse other versions
  embodied_ros.digest             str    "sha256:<64 hex>": SHA-256 of the whole file, with these 64
                                         hex characters read as "0"s (written last, in place)
  embodied_ros.writer             str    "embodied_ros <version>"
  embodied_ros.source             str    what the weights were converted from (optional)
  embodied_ros.quant_plan         str    the plan the weights were stored with, e.g. "lm=q8_0,expert=q4_k"
  embodied_ros.weight_groups      [str]  the group of each weight tensor, in file order
  <architecture>.<a>.<b>...       typed  the model config, a nested mapping flattened with dots:
                                         bool, int (i64), float (f64), str, or arrays of one of those
  embodied_ros.solver.<name>      typed  solver settings (same typing)
  embodied_ros.robot.state_names  [str]  joint order of the state vector          (optional, together)
  embodied_ros.robot.action_names [str]  columns of an action chunk
  embodied_ros.robot.action_period_s f64 time between consecutive actions
  embodied_ros.tokenizer.kind     str    "sentencepiece" when a tokenizer is present
  embodied_ros.reference.tolerance f64   present iff the bundle has a reference record
  embodied_ros.reference.field.<name> str     the record's string fields (e.g. task text)
  embodied_ros.reference.dtype.<kind>.<name> str  original dtype of each reference array
                                         ("uint8", "bool", ...; ":scalar" suffix for 0-d arrays)

Tensors (names; weights are named by the family and must not use the reserved prefixes):
  <weight name>                   F32 | F16 | BF16 | Q8_0 | Q4_K   (linear weights (out, in), numpy order)
  stats.<quantity>.<statistic>    F32    normalization statistics, e.g. stats.state.q01, stats.action.std
  tokenizer.model                 I8     the tokenizer model file, byte for byte
  reference.input.<name>          any    reference record arrays; bytes stored as F16/F32/F64 or the
  reference.noise.<name>                 integer type of the same item size, viewed back with the
  reference.expected.<name>              recorded dtype

A weight's *group* (for quantization plans and `bundle inspect` sizes) is its name up to the first
dot unless the family's converter passes its own `group_of`. Quantized layouts are ggml's (see
kernels/quant.py), so `gguf.quants.dequantize` reads every tensor.

Versioning: additive changes (new optional keys or tensors) keep format version 1; anything that
changes the meaning of an existing key or tensor increments it, and readers refuse versions they
do not know.

Integrity: `open_bundle` walks the header with bounds checks before gguf's reader sees it, and
refuses, with a message naming the file and the problem: a file that is not GGUF or has another
GGUF version (BundleFormatError); a header whose counts, lengths, types, shapes or offsets cannot
be right, duplicate keys or tensor names, overlapping tensors (BundleFormatError); a file shorter
than its header says (BundleTruncatedError); a bundle of another family than the caller asked for
(BundleArchitectureError); content that differs from the digest (BundleIntegrityError). All are
BundleError, a ValueError.

Model families
--------------
A family is the package `embodied_ros.models.<architecture>`. For bundles it provides:

  embodied_ros/models/<arch>/convert.py
      detect(source: Path) -> bool
          True if `source` (file or folder) is a checkpoint this family converts. Cheap: look at
          file names / a config file, never load weights.
      convert(source: Path, output: Path, quant_plan: QuantPlan, reference: Path | None,
              progress: bool) -> None
          Write the bundle with BundleWriter(arch, quant_plan): config, weights, stats, tokenizer,
          solver, robot; with `reference` (a folder of recorded cases), run them and store a
          ReferenceRecord whose tolerance suits the plan. Bad input raises ValueError.
  embodied_ros/models/<arch>/__init__.py
      verify_reference(bundle: Bundle, backend: str) -> tuple[float, float]
          Run the bundle's reference record; return (max abs error, tolerance).
      load_runtime(bundle: Bundle, backend: str) -> Runtime   (see pipeline/stages.py)
      model_spec(bundle: Bundle) -> ModelSpec                  from the metadata alone, no weights

`embodied-ros bundle convert` picks the family whose detect() accepts the source (or the one
named by --arch); `bundle verify` calls verify_reference (see bundle/families.py).
"""

from embodied_ros.bundle.errors import (BundleArchitectureError, BundleError, BundleFormatError,
                                        BundleIntegrityError, BundleTruncatedError)
from embodied_ros.bundle.plan import QuantPlan
from embodied_ros.bundle.quantize import encode_q4_k, quantization_error, quantize
from embodied_ros.bundle.reader import Bundle, TensorInfo, open_bundle
from embodied_ros.bundle.records import ReferenceRecord, RobotMetadata
from embodied_ros.bundle.writer import BundleWriter
from embodied_ros.kernels.quant import QuantTensor

__all__ = [
    "Bundle", "BundleArchitectureError", "BundleError", "BundleFormatError", "BundleIntegrityError",
    "BundleTruncatedError", "BundleWriter", "QuantPlan", "QuantTensor", "ReferenceRecord", "RobotMetadata",
    "TensorInfo", "encode_q4_k", "open_bundle", "quantization_error", "quantize",
]
