"""An action expert's Euler solve as CUDA graphs over static buffers (see gpu/pi05.py).

The buffers are sized once for the longest prefix (`rows` = its rows + the chunk): the prefix cache's
keys and values are copied into their first rows, the expert's own action keys and values go to the
last `chunk` rows, and a mask hides the rows in between. A solve writes its inputs (cache, noise,
RoPE tables, masks) into the buffers and replays one captured graph; the graph never changes.

    FlowSolve(engine, buffers, velocity, steps, out_weight, out_bias, prepare=None)
        velocity(buffers, step)  one velocity evaluation up to the final norm's output `buffers.h_final`
        prepare(buffers)         work that depends on the cache only, once per solve (cross-attention K/V)
    run(cache, noise, inputs, guidance)  -> the solved actions on the host
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from embodied_ros.gpu import layers
from embodied_ros.gpu.layers import F32
from embodied_ros.kernels.attention import MASKED


@dataclass
class ExpertBuffers:
    chunk: int
    cache_rows: int  # the longest prefix
    x_t: Any  # [C, A] float32, the flow's state (the action projection reads it in float32)
    v: Any  # [C, A] float32, one velocity (guided solves)
    x: Any  # [C, E] float32, the expert's residual stream
    h: Any  # [C, E] bf16, normed
    h_final: Any  # [C, E] float32, the final norm's output (the output projection reads it in float32)
    y: Any  # [C, E] float32, a product's update to the residual
    qkv: Any  # [C, (H + 2K) d] float32
    q: Any  # [C, H d] bf16
    attended: Any  # [C, H d] bf16
    keys: Any  # [cache layers, cache_rows + C, K d] bf16
    values: Any
    scores: Any  # [H, C, cache_rows + C] float32
    probabilities: Any  # [H, C, cache_rows + C] bf16
    gate_up: Any  # [C, 2F] bf16
    hidden: Any  # [C, F] bf16
    cos: Any  # [C, d / 2] float32: RoPE tables of the action tokens
    sin: Any
    inputs: dict[str, Any] = field(default_factory=dict)  # other per-solve inputs (masks), by name

    @classmethod
    def allocate(cls, engine, chunk: int, action_dim: int, width: int, mlp: int, num_heads: int, num_kv_heads: int,
                 head_dim: int, cache_layers: int, cache_rows: int, attention_width: int | None = None
                 ) -> "ExpertBuffers":
        """attention_width: of the expert's q/k/v (H d), when it differs from its own width."""
        e, c = engine, chunk
        heads_width = num_heads * head_dim
        rows = cache_rows + c
        return cls(
            chunk, cache_rows, e.zeros((c, action_dim), F32), e.zeros((c, action_dim), F32),
            e.zeros((c, width), F32), e.zeros((c, width), e.product_dtype), e.zeros((c, width), F32),
            e.zeros((c, width), F32),
            e.zeros((c, heads_width + 2 * num_kv_heads * head_dim), F32), e.zeros((c, heads_width), e.product_dtype),
            e.zeros((c, heads_width), e.product_dtype),
            e.zeros((cache_layers, rows, num_kv_heads * head_dim), e.product_dtype),
            e.zeros((cache_layers, rows, num_kv_heads * head_dim), e.product_dtype),
            e.zeros((num_heads, c, rows), F32), e.zeros((num_heads, c, rows), e.product_dtype),
            e.zeros((c, 2 * mlp), e.product_dtype), e.zeros((c, mlp), e.product_dtype),
            e.zeros((c, head_dim // 2), F32), e.zeros((c, head_dim // 2), F32))

    def add_input(self, engine, name: str, shape: tuple[int, ...], dtype=F32) -> Any:
        self.inputs[name] = engine.zeros(shape, dtype)
        return self.inputs[name]

    def attend(self, engine, layer: int, num_heads: int, num_kv_heads: int, head_dim: int, bias) -> None:
        """Self-attention of the action tokens over [cache layer `layer`; themselves]: RoPE'd q/k/v of
        `qkv` (the new keys and values into the cache buffers' last rows), then attention -> attended."""
        rows = self.cache_rows
        engine.rope_split(self.qkv, self.q, self.keys[layer][rows:], self.values[layer][rows:],
                          (num_heads, num_kv_heads, num_kv_heads), head_dim, self.cos, self.sin)
        layers.grouped_attention(engine, self.q, self.keys[layer], self.values[layer], num_heads, num_kv_heads,
                                 head_dim, head_dim ** -0.5, bias, self.scores, self.probabilities, self.attended)


def key_mask(cache, cache_rows: int, actions: int) -> np.ndarray:
    """[1, cache_rows + actions]: 0 on the cache's valid rows and on the action rows, MASKED elsewhere."""
    mask = np.full((1, cache_rows + actions), MASKED, np.float32)
    mask[0, : cache.num_rows][np.asarray(cache.valid, bool)] = 0.0
    mask[0, cache_rows:] = 0.0
    return mask


class FlowSolve:
    def __init__(self, engine, buffers: ExpertBuffers, velocity: Callable[[ExpertBuffers, int], None], steps: int,
                 out_weight, out_bias, prepare: Callable[[ExpertBuffers], None] | None = None) -> None:
        self.engine, self.buffers, self.steps = engine, buffers, steps
        self._velocity, self._prepare = velocity, prepare
        self._out_weight, self._out_bias = out_weight, out_bias
        self.dt = float(np.float32(-1.0 / steps))
        self._solve = None
        self._step_graphs: list = []
        self._prepare_graph = None

    # ---- the captured work --------------------------------------------------------------------

    def _euler_step(self, step: int) -> None:
        b, e = self.buffers, self.engine
        self._velocity(b, step)
        e.matmul(b.h_final, self._out_weight, b.x_t, alpha=self.dt, beta=1.0)
        e.axpy_cast(b.x_t, None, self._out_bias, self.dt)

    def _whole_solve(self) -> None:
        if self._prepare is not None:
            self._prepare(self.buffers)
        for step in range(self.steps):
            self._euler_step(step)

    def _velocity_only(self, step: int) -> None:
        b, e = self.buffers, self.engine
        self._velocity(b, step)
        e.matmul(b.h_final, self._out_weight, b.v)
        e.axpy_cast(b.v, None, self._out_bias, 1.0)

    def capture(self, guided: bool = False) -> None:
        """Capture the solve's graph (and, with `guided`, the per-step graphs) now, not in a control step."""
        if self._solve is None:
            with self.engine.active():
                self._whole_solve()  # once eagerly: every kernel loaded, every product's algorithm chosen
            self._solve = self.engine.graph(self._whole_solve)
        if guided and not self._step_graphs:
            if self._prepare is not None:
                self._prepare_graph = self.engine.graph(lambda: self._prepare(self.buffers))
            self._step_graphs = [self.engine.graph(lambda step=step: self._velocity_only(step))
                                 for step in range(self.steps)]

    # ---- one solve ----------------------------------------------------------------------------

    def run(self, cache, noise: np.ndarray, cos: np.ndarray, sin: np.ndarray, guidance=None,
            inputs: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """noise [C, A] -> x(t=0) [C, A] on the host. inputs: host values of `buffers.inputs` by name;
        without them the cache's key mask is written to the input named "key_mask" if there is one."""
        b, e = self.buffers, self.engine
        layers_read = b.keys.shape[0]
        if cache.num_rows > b.cache_rows:
            raise ValueError(f"the prefix has {cache.num_rows} rows; this solve was sized for {b.cache_rows}")
        if cache.num_layers < layers_read:
            raise ValueError(f"prefix cache has {cache.num_layers} layers, the expert reads {layers_read}")
        inputs = dict(inputs or {})
        if "key_mask" in b.inputs and "key_mask" not in inputs:
            inputs["key_mask"] = key_mask(cache, b.cache_rows, b.chunk)
        self.capture(guided=guidance is not None)  # a no-op after warm-up; its eager run overwrites the buffers
        with e.active():
            n = cache.num_rows
            b.keys[:, :n] = cache.keys[:layers_read]
            b.values[:, :n] = cache.values[:layers_read]
            e.write(b.cos, cos)
            e.write(b.sin, sin)
            for name, values in inputs.items():
                e.write(b.inputs[name], values)
            e.write(b.x_t, noise)
        if guidance is None:
            self._solve.replay()
            return e.download(b.x_t)
        return self._guided(noise, guidance)

    def _guided(self, noise: np.ndarray, guidance) -> np.ndarray:
        b, e = self.buffers, self.engine
        if self._prepare_graph is not None:
            self._prepare_graph.replay()
        x = np.array(noise, dtype=np.float32)
        dt = np.float32(self.dt)
        for step in range(self.steps):
            self._step_graphs[step].replay()
            v = guidance(x, e.download(b.v), step)
            x = x + dt * v
            with e.active():
                e.write(b.x_t, x)
        return x

