"""Stage outputs on the wire: by reference inside a process, as Tensor messages across processes.

A StageOutput message always travels on its topic. When producer and consumers share a process,
it carries only a `handle` and the object stays in this process's `ResultStore` (zero-copy: the
consumer gets the very object). Otherwise its arrays travel as `embodied_ros/Tensor` messages.
A StageOutput with `sequence` 0 is a skip marker: the stage ran its step but produced nothing.

Tensor names: a StageResult's arrays under their own names, its meta values as `meta/<key>`;
an Observation as `image/<camera>`, `state` and `instruction`. Strings use dtype "utf8".

Wire precision (`transport.wire_dtype`): a StageResult's float32 arrays (image tokens, the prefix
K/V) may travel as float16 or bfloat16, half the bytes; the receiver widens them back to float32,
the stages' type. Meta values, the state and action chunks always travel exact; an observation's
camera images travel as raw pixels, or (`transport.image_codec`) as PNG (exact) or JPEG bytes, a
Tensor of dtype "png" or "jpeg" whose shape is the image's (H, W, 3), decoded on arrival.
"""

from __future__ import annotations

import array
import os
import threading
import uuid
from collections import deque
from typing import Any, Union

import numpy as np

from embodied_ros.inputs.compressed import decoded_rgb8, encoded_rgb8
from embodied_ros.inputs.errors import ImageFormatError
from embodied_ros.node_infra.config import IMAGE_CODECS, WIRE_DTYPES, TransportConfig
from embodied_ros.inputs.stamps import ns_to_duration, ns_to_time, seconds_to_ns, time_to_ns
from embodied_ros.msg import ActionChunk, StageOutput, StageTiming, Tensor
from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult

Payload = Union[Observation, StageResult]
UTF8 = "utf8"
IMAGE_TENSOR_CODECS = tuple(codec for codec in IMAGE_CODECS if codec != "raw")  # Tensor dtypes of encoded images
BFLOAT16 = "bfloat16"  # the upper 16 bits of a float32, rounded to nearest even (numpy has no such type)
FLOAT16_MAX = float(np.finfo(np.float16).max)


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


def array_to_tensor(name: str, value: np.ndarray | str, wire_dtype: str = "float32") -> Tensor:
    """A Tensor message of `value`; a float32 array travels as `wire_dtype` (one of WIRE_DTYPES)."""
    if isinstance(value, str):
        raw, dtype, shape = value.encode("utf-8"), UTF8, []
    else:
        if hasattr(value, "__cuda_array_interface__"):  # a GPU array (a device runtime's cache): copied to the host
            value = value.get()
        value = np.ascontiguousarray(value)
        dtype, shape = value.dtype.name, list(value.shape)
        if dtype == "float32" and wire_dtype != "float32":
            value, dtype = narrow_float32(value, wire_dtype), wire_dtype
        raw = value.tobytes()
    data = array.array("B")
    data.frombytes(raw)
    msg = Tensor(name=name, dtype=dtype, shape=shape)
    msg.data = data
    return msg


def image_to_tensor(name: str, pixels: np.ndarray, codec: str, quality: int = 90) -> Tensor:
    """A Tensor message of (H, W, 3) uint8 pixels compressed as `codec` (jpeg or png)."""
    data = array.array("B")
    data.frombytes(encoded_rgb8(pixels, codec, quality))
    msg = Tensor(name=name, dtype=codec, shape=list(pixels.shape))
    msg.data = data
    return msg


def tensor_to_array(msg: Tensor) -> np.ndarray | str:
    """A read-only array viewing the message's bytes (or the text of a utf8 tensor); a float16 or
    bfloat16 tensor is widened to a float32 array (a copy), a jpeg or png tensor decoded."""
    if msg.dtype == UTF8:
        return bytes(msg.data).decode("utf-8")
    if msg.dtype in IMAGE_TENSOR_CODECS:
        try:
            pixels = decoded_rgb8(bytes(msg.data), msg.dtype, msg.name)
        except ImageFormatError as error:
            raise ValueError(str(error)) from None
        if list(pixels.shape) != list(msg.shape):
            raise ValueError(f"tensor {msg.name!r}: shape {list(msg.shape)} but its {msg.dtype} data is "
                             f"{list(pixels.shape)}")
        return pixels
    if msg.dtype == BFLOAT16:
        return widen_bfloat16(_viewed(msg, np.dtype("<u2")))
    if msg.dtype == "float16":
        return _viewed(msg, np.dtype("<f2")).astype(np.float32)
    try:
        dtype = np.dtype(msg.dtype).newbyteorder("<")
    except TypeError:
        raise ValueError(f"tensor {msg.name!r} has unknown dtype {msg.dtype!r}") from None
    values = _viewed(msg, dtype)
    return values.astype(dtype.newbyteorder("=")) if not dtype.isnative else values


def _viewed(msg: Tensor, dtype: np.dtype) -> np.ndarray:
    """The message's bytes as an array of `dtype` and its shape; ValueError when the sizes disagree."""
    count = int(np.prod(msg.shape, dtype=np.int64))
    if len(msg.data) != count * dtype.itemsize:
        raise ValueError(f"tensor {msg.name!r}: shape {list(msg.shape)} {msg.dtype} needs "
                         f"{count * dtype.itemsize} bytes, message has {len(msg.data)}")
    return np.frombuffer(msg.data, dtype=dtype).reshape(tuple(msg.shape))


def narrow_float32(values: np.ndarray, wire_dtype: str) -> np.ndarray:
    """float32 -> the 16-bit wire type: float16 (finite values beyond its range saturate at +-65504,
    instead of becoming inf) or bfloat16 words (uint16, rounded to nearest even; NaN stays NaN)."""
    if wire_dtype == "float16":
        finite = np.isfinite(values)
        return np.where(finite, np.clip(values, -FLOAT16_MAX, FLOAT16_MAX), values).astype("<f2")
    if wire_dtype != BFLOAT16:
        raise ValueError(f"wire dtype must be one of {WIRE_DTYPES}, got {wire_dtype!r}")
    bits = values.astype("<f4").view("<u4")
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16
    quiet_nan = np.uint32(0x7FC0)
    return np.where(np.isnan(values), quiet_nan, rounded).astype("<u2")


def widen_bfloat16(words: np.ndarray) -> np.ndarray:
    """bfloat16 words (uint16) -> float32, exactly."""
    return (words.astype(np.uint32) << 16).view(np.float32)


def encode_output(stage: str, sequence: int, step: int, payload: Payload | None, now_ns: int,
                  store: ResultStore | None, wire: TransportConfig = TransportConfig()) -> StageOutput:
    """StageOutput for `payload` (None: a skip marker); `store` None means serialize, a StageResult's
    float32 arrays as `wire.wire_dtype`, an observation's images as `wire.image_codec`."""
    msg = StageOutput(stage=stage, sequence=sequence if payload is not None else 0, step=step)
    msg.header.stamp = ns_to_time(now_ns)
    if payload is None:
        return msg
    msg.observation_stamp = ns_to_time(payload.stamp_ns)
    if store is not None:
        msg.handle = store.put(stage, payload)
    else:
        msg.tensors = [_to_tensor(payload, name, value, wire) for name, value in _flatten(payload).items()]
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


def _to_tensor(payload: Payload, name: str, value: np.ndarray | str, wire: TransportConfig) -> Tensor:
    """A StageResult's arrays travel at the wire precision, an observation's images in the wire's
    image codec, meta values and the rest exactly."""
    if isinstance(payload, Observation) and name.startswith("image/") and wire.image_codec != "raw":
        return image_to_tensor(name, value, wire.image_codec, wire.jpeg_quality)
    exact = isinstance(payload, Observation) or name.startswith("meta/")
    return array_to_tensor(name, value, "float32" if exact else wire.wire_dtype)


def _meta_value(value: np.ndarray | str) -> int | float | str:
    if isinstance(value, str):
        return value
    return value.item()
