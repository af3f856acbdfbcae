"""The numba CPU machinery behind the op modules: the one jit setting (jit.py), matrix products on
16-lane vector registers in float32 panels, bf16 pair panels and int8 blocks (gemm.py, bf16_gemm.py,
int8_gemm.py), the LLVM IR they are built from (vector_ir.py, vector_math.py), register-tile
attention (vector_attention.py) and the heap setting that keeps freed arrays for the next step
(allocator.py). The op modules one folder up export what the rest of the package calls."""
