"""sensor_msgs/CompressedImage (image_transport's compressed transport: JPEG or PNG) -> RGB pixels.

Cameras whose images go to another machine publish them compressed on `<topic>/compressed`; the
observation node decodes them with Pillow (libjpeg-turbo and zlib inside: a 640x480 JPEG in about
2 ms, a PNG in about 4 ms on the 2-core reference machine; BENCHMARKS.md, two_hosts).
`format` is image_transport's ("jpeg", "png", "rgb8; jpeg compressed bgr8", "mono16; png compressed
mono16"); the codec it names must be the data's. A JPEG holds its colours as colours whatever order
the sender's library kept in memory, so "compressed bgr8" decodes to the same RGB as "rgb8".
Empty, truncated, mislabelled or oversized data raises ImageFormatError, never anything else.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image as PILImage
from sensor_msgs.msg import CompressedImage

from embodied_ros.inputs.errors import ImageFormatError
from embodied_ros.inputs.image import ImageConversion, mono_to_uint8
from embodied_ros.inputs.stamps import ns_to_time

CODECS = {"jpeg": "JPEG", "jpg": "JPEG", "png": "PNG"}  # the word in `format` -> Pillow's name of the codec
MAX_PIXELS = 40_000_000  # larger images are refused before they are decoded (a camera sends at most ~8K)


def compressed_to_rgb8(msg: CompressedImage, name: str = "image",
                       conversion: ImageConversion = ImageConversion()) -> np.ndarray:
    """(H, W, 3) uint8 RGB, C-contiguous, from a JPEG or PNG CompressedImage."""
    codec = declared_codec(msg.format, name)
    if len(msg.data) == 0:
        raise ImageFormatError(f"{name}: compressed image has no data")
    image = _opened(bytes(msg.data), codec, name)
    return _rgb8(image, conversion)


def declared_codec(format_text: str, name: str = "image") -> str:
    """Pillow's name of the codec `format` names; ImageFormatError when it names none we decode."""
    words = format_text.lower().replace(";", " ").split()
    if "compresseddepth" in words:
        raise ImageFormatError(f"{name}: format {format_text!r} is image_transport's compressedDepth, which is not "
                               "supported; publish depth as a raw image (16UC1 or 32FC1)")
    named = {CODECS[word] for word in words if word in CODECS}
    if len(named) != 1:
        raise ImageFormatError(f"{name}: format {format_text!r} names no codec of {sorted(set(CODECS.values()))}")
    return named.pop()


def _opened(data: bytes, codec: str, name: str) -> PILImage.Image:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
            image = PILImage.open(io.BytesIO(data), formats=list(set(CODECS.values())))
            width, height = image.size
            if image.format != codec:
                raise ImageFormatError(f"{name}: format says {codec} but the data is {image.format}")
            if width * height > MAX_PIXELS:
                raise ImageFormatError(f"{name}: {width}x{height} image is over {MAX_PIXELS} pixels")
            image.load()
    except ImageFormatError:
        raise
    except Exception as error:  # Pillow's errors for broken data: UnidentifiedImageError, OSError, SyntaxError, ...
        raise ImageFormatError(f"{name}: cannot decode the {codec} data ({len(data)} bytes): {error}") from None
    return image


def _rgb8(image: PILImage.Image, conversion: ImageConversion) -> np.ndarray:
    if image.mode == "RGB":
        return np.ascontiguousarray(np.asarray(image))
    if image.mode in ("L", "I;16", "I;16B", "I;16L", "I"):  # grey, 8 or 16 bits (a 16-bit PNG opens as I;16 or I)
        pixels = np.asarray(image)
        if pixels.dtype != np.uint8:
            pixels = np.clip(pixels, 0, 65535).astype(np.uint16)
        return np.ascontiguousarray(np.repeat(mono_to_uint8(pixels, conversion)[..., None], 3, axis=2))
    return np.ascontiguousarray(np.asarray(image.convert("RGB")))  # palette, alpha, CMYK: colours as shown


def encoded_rgb8(pixels: np.ndarray, codec: str = "jpeg", quality: int = 90) -> bytes:
    """(H, W, 3) uint8 RGB pixels as JPEG (at `quality`) or PNG (fast compression) bytes."""
    if codec not in ("jpeg", "png"):
        raise ValueError(f"codec must be jpeg or png, got {codec!r}")
    buffer = io.BytesIO()
    options = {"quality": quality} if codec == "jpeg" else {"compress_level": 1}
    PILImage.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8)).save(buffer, CODECS[codec], **options)
    return buffer.getvalue()


def decoded_rgb8(data: bytes, codec: str, name: str = "image") -> np.ndarray:
    """(H, W, 3) uint8 RGB from JPEG or PNG bytes of `codec`; ImageFormatError for anything else."""
    return _rgb8(_opened(data, CODECS[codec], name), ImageConversion())


def rgb8_to_compressed(pixels: np.ndarray, codec: str = "jpeg", quality: int = 90, stamp_ns: int = 0,
                       frame_id: str = "") -> CompressedImage:
    """A CompressedImage of (H, W, 3) uint8 RGB pixels, as image_transport's compressed publisher
    sends an rgb8 image (format "rgb8; jpeg compressed bgr8" or "rgb8; png compressed bgr8")."""
    data = encoded_rgb8(pixels, codec, quality)
    msg = CompressedImage(format=f"rgb8; {codec} compressed bgr8")
    msg.header.stamp = ns_to_time(stamp_ns)
    msg.header.frame_id = frame_id
    msg.data = data
    return msg
