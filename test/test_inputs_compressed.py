"""sensor_msgs/CompressedImage (JPEG, PNG) -> RGB: the codec's error bounds, image_transport's format
strings, and a clear ImageFormatError for every kind of bad data."""

import io

import numpy as np
import pytest
from PIL import Image as PILImage
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import CompressedImage

from embodied_ros.inputs import ImageFormatError
from embodied_ros.inputs.compressed import compressed_to_rgb8, declared_codec, rgb8_to_compressed
from embodied_ros.inputs.image import ImageConversion
from embodied_ros.sim import robot


def _scene(size=(48, 64)) -> np.ndarray:
    return robot.render_view(0, robot.rest_positions(("a", "b", "c")), size)


def _compressed(data: bytes, format_text: str) -> CompressedImage:
    msg = CompressedImage(format=format_text)
    msg.data = data
    return deserialize_message(serialize_message(msg), CompressedImage)


def _encoded(pixels: np.ndarray, codec: str, **options) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(pixels).save(buffer, codec, **options)
    return buffer.getvalue()


def test_png_is_exact_and_jpeg_is_within_its_quality_error():
    pixels = _scene()
    png = compressed_to_rgb8(rgb8_to_compressed(pixels, "png"), "front")
    np.testing.assert_array_equal(png, pixels)
    jpeg = compressed_to_rgb8(rgb8_to_compressed(pixels, "jpeg", quality=90), "front")
    assert jpeg.shape == pixels.shape and jpeg.dtype == np.uint8 and jpeg.flags.c_contiguous
    error = np.abs(jpeg.astype(int) - pixels.astype(int))
    assert 0 < error.mean() < 3.0  # lossy, but close: the rendered scene's edges cost a few levels


@pytest.mark.parametrize("format_text, codec", [
    ("jpeg", "JPEG"), ("rgb8; jpeg compressed bgr8", "JPEG"), ("bgr8; jpeg compressed bgr8", "JPEG"),
    ("png", "PNG"), ("mono16; png compressed mono16", "PNG"), ("JPG", "JPEG"),
])
def test_image_transport_formats_name_their_codec(format_text, codec):
    assert declared_codec(format_text) == codec


@pytest.mark.parametrize("format_text, message", [
    ("", "names no codec"), ("tiff", "names no codec"), ("16UC1; compressedDepth png", "compressedDepth"),
    ("jpeg png", "names no codec"),
])
def test_formats_that_name_no_single_decodable_codec_are_refused(format_text, message):
    with pytest.raises(ImageFormatError, match=message):
        declared_codec(format_text, "camera front")


def test_a_jpeg_in_bgr8_order_decodes_to_the_same_colours():
    """image_transport's "compressed bgr8" is OpenCV's order in memory; the JPEG holds colours."""
    pixels = _scene()
    rgb = compressed_to_rgb8(_compressed(_encoded(pixels, "PNG"), "bgr8; png compressed bgr8"))
    np.testing.assert_array_equal(rgb, pixels)


def test_grey_and_16_bit_png_become_three_equal_channels():
    grey = np.arange(48 * 64, dtype=np.uint16).reshape(48, 64) * 20
    rgb = compressed_to_rgb8(_compressed(_encoded(grey, "PNG"), "mono16; png compressed mono16"),
                             conversion=ImageConversion(mono_max=65535.0))
    assert rgb.shape == (48, 64, 3) and np.array_equal(rgb[..., 0], rgb[..., 2])
    np.testing.assert_array_equal(rgb[..., 0], np.rint(grey / 65535.0 * 255).astype(np.uint8))
    mono8 = compressed_to_rgb8(_compressed(_encoded(grey.astype(np.uint8), "PNG"), "mono8; png compressed mono8"))
    np.testing.assert_array_equal(mono8[..., 1], grey.astype(np.uint8))


def test_rgba_png_drops_its_alpha():
    rgba = np.dstack([_scene(), np.full((48, 64), 7, np.uint8)])
    np.testing.assert_array_equal(compressed_to_rgb8(_compressed(_encoded(rgba, "PNG"), "png")), rgba[..., :3])


@pytest.mark.parametrize("data, format_text, message", [
    (b"", "jpeg", "has no data"),
    (b"\x00" * 100, "jpeg", "cannot decode the JPEG data"),
    ("png_as_jpeg", "jpeg", "format says JPEG but the data is PNG"),
    ("truncated_jpeg", "jpeg", "cannot decode the JPEG data"),
    ("truncated_png", "png", "cannot decode the PNG data"),
    ("huge_png", "png", "over 40000000 pixels"),
])
def test_bad_data_is_a_clear_image_format_error(data, format_text, message):
    pixels = _scene()
    made = {
        "png_as_jpeg": lambda: _encoded(pixels, "PNG"),
        "truncated_jpeg": lambda: _encoded(pixels, "JPEG")[:300],
        "truncated_png": lambda: _encoded(pixels, "PNG")[:200],
        "huge_png": lambda: _huge_png_header(),
    }
    raw = made[data]() if isinstance(data, str) else data
    with pytest.raises(ImageFormatError, match=message) as caught:
        compressed_to_rgb8(_compressed(raw, format_text), "camera front")
    assert str(caught.value).startswith("camera front: ")


def _huge_png_header() -> bytes:
    """A PNG whose header says 10000 x 10000 (its data is a tiny image's): refused before decoding."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", 10000, 10000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 10)) + chunk(b"IEND", b"")


def test_rgb8_to_compressed_says_what_image_transport_would():
    msg = rgb8_to_compressed(_scene(), "jpeg", stamp_ns=1_500_000_000, frame_id="front")
    assert msg.format == "rgb8; jpeg compressed bgr8" and msg.header.frame_id == "front"
    assert msg.header.stamp.sec == 1 and msg.header.stamp.nanosec == 500_000_000
    with pytest.raises(ValueError, match="codec must be jpeg or png"):
        rgb8_to_compressed(_scene(), "webp")
