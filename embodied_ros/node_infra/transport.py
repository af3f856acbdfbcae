"""Stage outputs on the wire: by reference inside a process, as Tensor messages across processes.

A StageOutput message always travels on its topic. When producer and consumers share a process,
it carries only a `handle` and the object stays in this process's `ResultStore` (zero-copy: the
consumer gets the very object). Otherwise its arrays travel as `embodied_ros/Tensor` messages.
A StageOutput with `sequence` 0 is a skip marker: the stage ran its step but produced nothing.

Tensor names: a StageResult's arrays under their own names, its meta values as `meta/<key>`;
an Observation as `image/<camera>`, `state` and `instruction`. Strings use dtype "utf8".
"""

from __future__ import annotations

import array
import os
import threading
import uuid
from collections import deque
from typing import Any, Union

import numpy as np

from embodied_ros.inputs.stamps import ns_to_duration, ns_to_time, seconds_to_ns, time_to_ns
from embodied_ros.msg import ActionChunk, StageOutput, StageTiming, Tensor
from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult

Payload = Union[Observation, StageResult]
UTF8 = "utf8"


class ResultStore:
    """Outputs handed over by reference: handle -> object, the newest `keep_last` per stage."""

    def __init__(self, keep_last: int = 8):
        self.keep_last = keep_last
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._objects: dict[str, Any] = {}
        self._count = 0
        self._order: dict[str, deque[str]] = {}
        self._lock = threading.Lock()

    def put(self, stage: str, obj: Any) -> str:
        """Keep `obj` and return its handle (unique within this store, whatever the stage's counters)."""
        with self._lock:
            self._count += 1
            handle = f"{self._token}/{stage}/{self._count}"
            order = self._order.setdefault(stage, deque())
            order.append(handle)
            self._objects[handle] = obj
            while len(order) > self.keep_last:
                self._objects.pop(order.popleft(), None)
        return handle

    def get(self, handle: str) -> Any:
        with self._lock:
            if handle in self._objects:
                return self._objects[handle]
        if not handle.startswith(self._token + "/"):
            raise LookupError(f"output {handle} lives in another process; use transport.mode: serialized "
                              f"when stages run in separate processes")
        raise LookupError(f"output {handle} was dropped (newer ones replaced it; raise transport.keep_last)")


PROCESS_STORE = ResultStore()  # shared by every node of this process


def array_to_tensor(name: str, value: np.ndarray | str) -> Tensor:
    if isinstance(value, str):
        raw, dtype, shape = value.encode("utf-8"), UTF8, []
    else:
        if hasattr(value, "__cuda_array_interface__"):  # a GPU array (a device runtime's cache): copied to the host
            value = value.get()
        value = np.ascontiguousarray(value)
        raw, dtype, shape = value.tobytes(), value.dtype.name, list(value.shape)
    data = array.array("B")
    data.frombytes(raw)
    msg = Tensor(name=name, dtype=dtype, shape=shape)
    msg.data = data
    return msg


def tensor_to_array(msg: Tensor) -> np.ndarray | str:
    """A read-only array viewing the message's bytes (or the text of a utf8 tensor)."""
    if msg.dtype == UTF8:
        return bytes(msg.data).decode("utf-8")
    try:
        dtype = np.dtype(msg.dtype).newbyteorder("<")
    except TypeError:
        raise ValueError(f"tensor {msg.name!r} has unknown dtype {msg.dtype!r}") from None
    count = int(np.prod(msg.shape, dtype=np.int64))
    if len(msg.data) != count * dtype.itemsize:
        raise ValueError(f"tensor {msg.name!r}: shape {list(msg.shape)} {msg.dtype} needs "
                         f"{count * dtype.itemsize} bytes, message has {len(msg.data)}")
    values = np.frombuffer(msg.data, dtype=dtype).reshape(tuple(msg.shape))
    return values.astype(dtype.newbyteorder("=")) if not dtype.isnative else values


def encode_output(stage: str, sequence: int, step: int, payload: Payload | None, now_ns: int,
                  store: ResultStore | None) -> StageOutput:
    """StageOutput for `payload` (None: a skip marker); `store` None means serialize."""
    msg = StageOutput(stage=stage, sequence=sequence if payload is not None else 0, step=step)
    msg.header.stamp = ns_to_time(now_ns)
    if payload is None:
        return msg
    msg.observation_stamp = ns_to_time(payload.stamp_ns)
    if store is not None:
        msg.handle = store.put(stage, payload)
    else:
        msg.tensors = [array_to_tensor(name, value) for name, value in _flatten(payload).items()]
    return msg


def decode_output(msg: StageOutput, store: ResultStore) -> Payload | None:
    """The output carried by `msg`; None for a skip marker. LookupError/ValueError if unreadable."""
    if msg.sequence == 0:
        return None
    if msg.handle:
        return store.get(msg.handle)
    stamp_ns = time_to_ns(msg.observation_stamp)
    values = {t.name: tensor_to_array(t) for t in msg.tensors}
    if msg.stage == "observation":
        images = {name[len("image/"):]: v for name, v in values.items() if name.startswith("image/")}
        return Observation(stamp_ns=stamp_ns, images=images, state=values.get("state"),
                           instruction=values.get("instruction", ""))
    meta = {name[len("meta/"):]: _meta_value(v) for name, v in values.items() if name.startswith("meta/")}
    tensors = {name: v for name, v in values.items() if not name.startswith("meta/")}
    return StageResult(stage=msg.stage, stamp_ns=stamp_ns, tensors=tensors, meta=meta)


def chunk_to_msg(chunk: ActionChunkResult | None, now_ns: int) -> ActionChunk:
    """ActionChunk message; None gives the skip marker (horizon 0)."""
    msg = ActionChunk()
    msg.header.stamp = ns_to_time(now_ns)
    if chunk is None:
        return msg
    actions = np.asarray(chunk.actions, dtype=np.float32)
    msg.observation_stamp = ns_to_time(chunk.stamp_ns)
    msg.action_period = ns_to_duration(seconds_to_ns(chunk.action_period_s))
    msg.horizon, msg.action_dim = actions.shape
    msg.joint_names = list(chunk.joint_names)
    data = array.array("f")
    data.frombytes(np.ascontiguousarray(actions).tobytes())
    msg.actions = data
    return msg


def msg_to_chunk(msg: ActionChunk) -> ActionChunkResult | None:
    """The chunk in `msg`, None for a skip marker; ValueError when its sizes disagree."""
    if msg.horizon == 0:
        return None
    if len(msg.actions) != msg.horizon * msg.action_dim:
        raise ValueError(f"action chunk says {msg.horizon}x{msg.action_dim} but has {len(msg.actions)} values")
    if msg.joint_names and len(msg.joint_names) != msg.action_dim:
        raise ValueError(f"action chunk has {len(msg.joint_names)} joint names for {msg.action_dim} columns")
    actions = np.frombuffer(msg.actions, dtype=np.float32).reshape(msg.horizon, msg.action_dim)
    return ActionChunkResult(stamp_ns=time_to_ns(msg.observation_stamp), actions=actions,
                             action_period_s=time_to_ns(msg.action_period) / 1e9,
                             joint_names=tuple(msg.joint_names))


def timing_msg(stage: str, sequence: int, step: int, observation_stamp_ns: int, compute_ms: float,
               staleness_ms: float, now_ns: int) -> StageTiming:
    msg = StageTiming(stage=stage, sequence=sequence, step=step, compute_ms=float(compute_ms),
                      staleness_ms=float(staleness_ms))
    msg.header.stamp = ns_to_time(now_ns)
    msg.observation_stamp = ns_to_time(observation_stamp_ns)
    return msg


def _flatten(payload: Payload) -> dict[str, np.ndarray | str]:
    if isinstance(payload, Observation):
        flat: dict[str, Any] = {f"image/{name}": image for name, image in payload.images.items()}
        if payload.state is not None:
            flat["state"] = payload.state
        flat["instruction"] = payload.instruction
        return flat
    flat = dict(payload.tensors)
    for key, value in payload.meta.items():
        flat[f"meta/{key}"] = value if isinstance(value, str) else np.asarray(value)
    return flat


def _meta_value(value: np.ndarray | str) -> int | float | str:
    if isinstance(value, str):
        return value
    return value.item()
