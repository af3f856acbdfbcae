"""Shared helpers of the benchmark scripts: timing, memory, FLOP counts, machine description,
BENCHMARKS.md sections, and the call into the PyTorch reference (torch_reference.py).

Standard library only at import time (numpy is imported where it is needed), so the same file
serves the project's environment and the PyTorch reference environment.

FLOP counts are 2 x the multiply-adds of the matrix products (projections, attention scores and
weighted sums, MLPs) over the full padded lengths; norms, activations, RoPE and softmax are not
counted. Every benchmark divides by the same counts, so GFLOP/s figures compare like with like.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

BENCHMARKS_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCHMARKS_DIR.parent
BENCHMARKS_MD = REPO_ROOT / "BENCHMARKS.md"
TORCH_REFERENCE_SCRIPT = BENCHMARKS_DIR / "torch_reference.py"
REFERENCE_PYTHON_ENV = "EMBODIED_ROS_REF_PYTHON"  # the reference environment's interpreter (reference/install.sh)
UNSET_REFERENCE_PYTHON = f"${REFERENCE_PYTHON_ENV} (not set)"  # names no file: existence checks fail on it
WORK_DIR_ENV = "EMBODIED_ROS_BENCH_DIR"  # scratch folder for bundles and records the benchmarks make
REFERENCE_GENERATORS = REPO_ROOT / "reference"  # the reference record generators (reference/README.md)
EXIT_REFERENCE_MISSING = 3  # torch_reference.py: torch / lerobot / diffusers not importable
# Process-wide settings embodied_ros makes for itself (kernels/cpu/jit.py: its OpenMP threads sleep
# between regions). The PyTorch reference runs with the value this process started with instead:
# passive waiting would slow torch's own OpenMP pool (pi05_small chunk ~80 -> ~140 ms).
RUNTIME_ONLY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_ENVIRONMENT_AT_START = {name: os.environ.get(name) for name in RUNTIME_ONLY_VARIABLES}


# ---------------------------------------------------------------- timing and memory

@dataclass
class Timing:
    """Wall-clock times of repeated runs, in milliseconds."""
    runs_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.runs_ms)

    def as_dict(self) -> dict:
        return {"median_ms": round(self.median_ms, 3), "runs_ms": [round(t, 3) for t in self.runs_ms]}


def time_repeats(fn: Callable[[], object], repeats: int, warmup: int = 1,
                 setup: Callable[[], object] | None = None) -> Timing:
    """Run `fn` `warmup` times untimed, then `repeats` times timed; `setup` runs untimed before each call."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    timing = Timing()
    for i in range(warmup + repeats):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if i >= warmup:
            timing.runs_ms.append(elapsed_ms)
    return timing


def gflops_per_s(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (VmHWM; ru_maxrss, in KiB, where /proc is absent)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def numpy_matmul_gflops(m: int = 800, k: int = 2048, n: int = 2048, repeats: int = 5,
                        dtype: str = "float32") -> dict:
    """numpy's (BLAS) matmul rate for an (m, k) @ (k, n) product: the machine's practical ceiling."""
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    timing = time_repeats(lambda: a @ b, repeats=repeats, warmup=1)
    flops = 2.0 * m * k * n
    return {"shape": [m, k, n], "dtype": dtype, "flops": flops, **timing.as_dict(),
            "gflops_per_s": round(gflops_per_s(flops, timing.median_ms), 2)}


# ---------------------------------------------------------------- FLOP counts

def flops_siglip_layer(tokens: int, width: int, mlp_dim: int) -> float:
    """One pre-LN ViT encoder layer, full (unmasked) attention."""
    projections = 4 * tokens * width * width
    attention = 2 * tokens * tokens * width
    mlp = 2 * tokens * width * mlp_dim
    return 2.0 * (projections + attention + mlp)


def flops_gemma_layer(tokens: int, width: int, num_heads: int, num_kv_heads: int, head_dim: int,
                      mlp_dim: int, kv_len: int | None = None, adarms: bool = False) -> float:
    """One Gemma decoder layer over `tokens` queries reading `kv_len` keys (default: the tokens themselves).
    adarms: the action expert's adaptive norms, two (3*width, width) products of the condition vector."""
    kv_len = tokens if kv_len is None else kv_len
    attn_width, kv_width = num_heads * head_dim, num_kv_heads * head_dim
    projections = tokens * (2 * width * attn_width + 2 * width * kv_width)
    attention = 2 * tokens * kv_len * attn_width
    mlp = 3 * tokens * width * mlp_dim
    modulation = 2 * 3 * width * width if adarms else 0
    return 2.0 * (projections + attention + mlp + modulation)


def flops_wan_block(tokens: int, text_tokens: int, dim: int, ffn_dim: int) -> float:
    """One Wan transformer block: self-attention, cross-attention to text, FFN."""
    self_attention = 4 * tokens * dim * dim + 2 * tokens * tokens * dim
    cross_attention = 2 * tokens * dim * dim + 2 * text_tokens * dim * dim + 2 * tokens * text_tokens * dim
    ffn = 2 * tokens * dim * ffn_dim
    return 2.0 * (self_attention + cross_attention + ffn)


def flops_pi05_chunk(config: dict) -> dict:
    """Per-stage FLOPs of one pi0.5 action chunk, from a reference record's config.json."""
    vis, lm, ex = config["vision"], config["language_model"], config["expert"]
    n_cams, tokens_per_cam = config["n_cameras"], vis["tokens_per_camera"]
    prefix_len, chunk = config["prefix_len"], config["chunk_size"]
    patch_in = 3 * vis["patch_size"] ** 2
    per_camera = (2.0 * tokens_per_cam * patch_in * vis["width"]
                  + vis["depth"] * flops_siglip_layer(tokens_per_cam, vis["width"], vis["mlp_dim"])
                  + 2.0 * tokens_per_cam * vis["width"] * lm["width"])
    heads = dict(num_heads=lm["num_heads"], num_kv_heads=lm["num_kv_heads"], head_dim=lm["head_dim"])
    prefix = lm["depth"] * flops_gemma_layer(prefix_len, lm["width"], mlp_dim=lm["mlp_dim"], **heads)
    e = ex["width"]
    step = (ex["depth"] * flops_gemma_layer(chunk, e, mlp_dim=ex["mlp_dim"], kv_len=prefix_len + chunk,
                                            adarms=True, **heads)
            + 2.0 * (2 * chunk * config["max_action_dim"] * e + 2 * e * e + 3 * e * e))
    steps = config["num_inference_steps"]
    return {"vision": n_cams * per_camera, "prefix": prefix, "expert_step": step,
            "total": n_cams * per_camera + prefix + steps * step}


# ---------------------------------------------------------------- a load beside the runs

# What `--load` adds beside a benchmark's runs: the threads that share the cores with the stages in
# `embodied-ros up` (the synthetic robot's rendering and publishing, the controller, the middleware)
# took a third of one core on a 2-core AMD EPYC in 4-10 ms bursts, at a higher priority than the
# stages' compute (compute.stage_nice).
_BUSY_LOOP = """import sys, time
busy, period = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < busy:
        pass
    time.sleep(period - busy)
"""


STAGE_NICE = 5  # compute.stage_nice's default: what the stages' threads add to their nice value in the graph


def add_load_argument(parser, runs_at: str) -> None:
    """The `--load BUSY/PERIOD` option; `runs_at`: which processes run at STAGE_NICE."""
    parser.add_argument("--load", metavar="BUSY/PERIOD", type=_load_value,
                        help=f"beside the runs, a process busy BUSY ms of every PERIOD ms, {runs_at} at the stages' "
                             "lower priority (module doc)")


def _load_value(text: str) -> tuple[float, float]:
    """'BUSY/PERIOD' in ms -> (busy, period), refused unless 0 < BUSY < PERIOD."""
    busy, _, period = text.partition("/")
    try:
        values = float(busy), float(period)
    except ValueError:
        values = (0.0, 0.0)
    if not 0 < values[0] < values[1]:
        raise argparse.ArgumentTypeError(f"expected BUSY/PERIOD in ms with 0 < BUSY < PERIOD, e.g. 4/12; got {text!r}")
    return values


@contextlib.contextmanager
def load_beside(load: tuple[float, float] | None):
    """With `load` (busy, period ms), a process busy that much at this process's priority for the
    block's duration; nothing without."""
    beside = subprocess.Popen([sys.executable, "-c", _BUSY_LOOP, *map(str, load)]) if load else None
    try:
        yield
    finally:
        if beside is not None:
            beside.kill()
            beside.wait()


def load_words(load: tuple[float, float] | None, runs_at: str) -> str:
    """The sentence a section gets for `--load` ("" without)."""
    if not load:
        return ""
    return f" Beside the runs, a process busy {load[0]:g} ms of every {load[1]:g} ms; {runs_at} at nice {STAGE_NICE}."


# ---------------------------------------------------------------- machine description

def machine_description() -> dict:
    """CPU, cores, load and the numpy/BLAS build: what a reader needs to judge the numbers."""
    info = {"cpu_model": _cpu_model(), "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)),
            "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "platform": platform.platform(),
            "thread_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                      "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
                           if k in os.environ}}
    try:
        import numpy as np
        blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
        info["numpy"] = np.__version__
        info["blas"] = {k: blas.get(k) for k in ("name", "version", "openblas configuration") if blas.get(k)}
        info["blas"]["kernels"] = openblas_kernels()
    except ImportError:
        info["numpy"] = None
    info["openblas_coretype_env"] = os.environ.get("OPENBLAS_CORETYPE")
    return info


def openblas_kernels() -> str | None:
    """The CPU kernel set numpy's OpenBLAS runs ("Haswell": AVX2, "SkylakeX": AVX-512, ...): picked
    when numpy loads it, from the CPU or from OPENBLAS_CORETYPE; None for another BLAS."""
    import ctypes
    from pathlib import Path as _Path

    import numpy as np
    for library in sorted((_Path(np.__file__).parent.parent / "numpy.libs").glob("*openblas*")):
        lib = ctypes.CDLL(str(library))
        for symbol in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
            corename = getattr(lib, symbol, None)
            if corename is not None:
                corename.restype = ctypes.c_char_p
                return corename().decode()
    return None


def runtime_products_note() -> str:
    """A sentence on what runs this runtime's matrix products on this CPU (imports the runtime)."""
    from embodied_ros.kernels import linear
    if linear.VECTOR_GEMM:
        return (" This runtime's matrix products and attention run as numba kernels on the CPU's 16-lane vectors "
                "(AVX-512; embodied_ros/kernels/cpu/gemm.py), not through OpenBLAS: OPENBLAS_CORETYPE changes only "
                "numpy's sgemm rate shown here and the PyTorch side (MKL) not at all.")
    return " This runtime's float32 matrix products run through numpy's BLAS (the CPU has no AVX-512)."


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


CPU_FEATURES = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")


MASKED_FEATURES_ENV = "EMBODIED_ROS_MASKED_CPU_FEATURES"  # set by avx2_only.py: prefixes of hidden features


def masked_features() -> tuple[str, ...]:
    """Prefixes of the CPU features this process runs without (avx2_only.py), or ()."""
    return tuple(prefix for prefix in os.environ.get(MASKED_FEATURES_ENV, "").split(",") if prefix)


def cpu_features() -> str:
    """The CPU's vector and matrix extensions that decide which kernels run (/proc/cpuinfo flags),
    without those this process runs without."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line.split(":", 1)[1].split() for line in f if line.startswith("flags"))
    except (OSError, StopIteration):
        return "unknown"
    hidden = masked_features()
    shown = [flag for flag in CPU_FEATURES if flag in flags and not (hidden and flag.startswith(hidden))]
    return " ".join(shown) or "none of " + " ".join(CPU_FEATURES)


def machine_line(info: dict | None = None) -> str:
    """One markdown line summarizing machine_description()."""
    info = info or machine_description()
    blas = info.get("blas") or {}
    kernels = ""
    if blas.get("kernels"):
        forced = info.get("openblas_coretype_env")
        kernels = f" ({blas['kernels']} kernels" + (f", OPENBLAS_CORETYPE={forced})" if forced else ")")
    return (f"{info['cpu_model']} ({cpu_features()}), {info['usable_cpus']} usable of {info['logical_cpus']} CPUs, "
            f"load average {info['loadavg_1_5_15'][0]}; Python {info['python']}, numpy {info.get('numpy')} "
            f"with {blas.get('name', 'unknown BLAS')} {blas.get('version', '')}".rstrip() + kernels
            + (f"; run as an AVX2-only CPU (benchmarks/avx2_only.py: {', '.join(p + '*' for p in masked_features())} "
               "hidden)" if masked_features() else ""))


# ---------------------------------------------------------------- BENCHMARKS.md

def chosen(parser, option: str, text: str, known) -> list[str]:
    """A comma-separated option's names, each one of `known` (else the parser's usage error)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or set(names) - set(known):
        parser.error(f"{option} takes {', '.join(known)}; got {names}")
    return names


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """rows of dicts -> a markdown table; floats get 4 significant digits, missing cells stay empty."""
    if not rows:
        raise ValueError("markdown_table needs at least one row")
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def write_section(path: str | Path, name: str, body: str, command: str | None = None,
                  machine: str | None = None) -> None:
    """Write or replace the section `name` of a markdown file (created if absent); other sections stay.

    The section is delimited by HTML comments, so a rerun replaces exactly what it wrote before.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"section name must be letters, digits, '_', '.', '-', got {name!r}")
    path = Path(path)
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    parts = [begin, f"## {name}", ""]
    if command:
        parts += [f"Command: `{command}`", ""]
    if machine:
        parts += [f"Machine: {machine}", ""]
    parts += [body.strip(), "", end]
    section = "\n".join(parts)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text if text.endswith("\n") else text + "\n")


def command_line() -> str:
    """The command that started this script, for recording next to its results."""
    return " ".join([Path(sys.executable).name, *sys.argv])


# ---------------------------------------------------------------- the PyTorch reference

class ReferenceUnavailable(RuntimeError):
    """The PyTorch reference environment is not installed (see docs/reference.md)."""


def reference_python() -> str:
    """The PyTorch reference interpreter, $EMBODIED_ROS_REF_PYTHON; when that is unset, a name that is no
    file, so that `Path(reference_python()).exists()` is False and the reference counts as missing."""
    return os.environ.get(REFERENCE_PYTHON_ENV) or UNSET_REFERENCE_PYTHON


def add_workdir_argument(parser, name: str, what: str = "where bundles and records are written") -> None:
    """--workdir: $EMBODIED_ROS_BENCH_DIR/<name>, or embodied_ros_bench/<name> in the temp folder."""
    base = Path(os.environ.get(WORK_DIR_ENV) or Path(tempfile.gettempdir()) / "embodied_ros_bench")
    parser.add_argument("--workdir", type=Path, default=base / name,
                        help=f"{what} (default ${WORK_DIR_ENV}/{name}, or embodied_ros_bench/{name} in the "
                             f"temp folder when {WORK_DIR_ENV} is unset)")


def reference_python_help() -> str:
    return (f"interpreter of the PyTorch reference environment (default ${REFERENCE_PYTHON_ENV}; "
            "reference/install.sh builds the environment)")


def reference_environment() -> dict[str, str]:
    """The environment of the reference process: this one's, offline, without the runtime's own settings."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for name, value in _ENVIRONMENT_AT_START.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_torch_reference(mode: str, *, tokens: int | None = None, prefix_tokens: int | None = None,
                        text_tokens: int | None = None, repeats: int | None = None, warmup: int | None = None,
                        dtype: str | None = None, threads: int | None = None,
                        record: str | Path | None = None, timeout_s: float = 1800) -> dict:
    """Run `torch_reference.py MODE ... --json` in the reference interpreter and return its JSON.

    Raises ReferenceUnavailable when that interpreter or its packages are missing, RuntimeError when
    the measurement itself fails.
    """
    python = reference_python()
    if not Path(python).exists():
        raise ReferenceUnavailable(f"no PyTorch reference interpreter at {python} "
                                   f"(set {REFERENCE_PYTHON_ENV}; see docs/reference.md)")
    cmd = [python, str(TORCH_REFERENCE_SCRIPT), mode, "--json"]
    for flag, value in (("--tokens", tokens), ("--prefix-tokens", prefix_tokens), ("--text-tokens", text_tokens),
                        ("--repeats", repeats), ("--warmup", warmup), ("--dtype", dtype),
                        ("--threads", threads), ("--record", record)):
        if value is not None:
            cmd += [flag, str(value)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=reference_environment())
    if proc.returncode == EXIT_REFERENCE_MISSING:
        raise ReferenceUnavailable(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else
                                   "reference packages missing")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit status {proc.returncode}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)
