"""The CUDA backend: kernel declaration and PTX compilation (compiler.py), the numba kernel ABI
(abi.py), device helpers (device.py), the runtime and its device tensors (runtime.py), the launcher
loaded on the first GPU call (launch.py) and its driver calls through CuPy (driver.py), the tensor-core products built by nvcc from
kernels/gemm.cu (gemm.py), and the ops' CUDA implementations (attention.py, elementwise.py,
linear.py, norms.py, rope.py), which the registry loads. Nothing here opens a GPU at import."""
