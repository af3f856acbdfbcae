"""Image messages -> arrays: every supported encoding, row padding, byte order, and bad input."""

import array

import numpy as np
import pytest
from sensor_msgs.msg import Image

from embodied_ros.inputs import ImageConversion, ImageFormatError, array_to_image, image_to_array, image_to_rgb8


def _padded_message(pixels: np.ndarray, encoding: str, pad: int, bigendian: bool = False) -> Image:
    """An Image whose rows carry `pad` junk bytes, as some camera drivers send."""
    height, width = pixels.shape[:2]
    wire = pixels.astype(pixels.dtype.newbyteorder(">" if bigendian else "<"))
    rows = wire.reshape(height, -1).view(np.uint8)
    padded = np.concatenate([rows, np.full((height, pad), 0xAB, np.uint8)], axis=1)
    data = array.array("B")
    data.frombytes(padded.tobytes())
    msg = Image(height=height, width=width, encoding=encoding, is_bigendian=int(bigendian), step=padded.shape[1])
    msg.data = data
    return msg


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_rgb8_round_trip_is_exact(rng):
    pixels = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    msg = array_to_image(pixels, "rgb8", stamp_ns=3_000_000_001, frame_id="cam")
    assert msg.step == 21 and msg.header.stamp.sec == 3 and msg.header.stamp.nanosec == 1
    np.testing.assert_array_equal(image_to_array(msg), pixels)
    np.testing.assert_array_equal(image_to_rgb8(msg), pixels)


def test_bgr8_and_bgra8_become_rgb(rng):
    rgb = rng.integers(0, 256, (4, 6, 3), dtype=np.uint8)
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    np.testing.assert_array_equal(image_to_rgb8(array_to_image(bgr, "bgr8")), rgb)
    bgra = np.concatenate([bgr, np.full((4, 6, 1), 9, np.uint8)], axis=2)
    np.testing.assert_array_equal(image_to_rgb8(array_to_image(bgra, "bgra8")), rgb)
    rgba = np.concatenate([rgb, np.full((4, 6, 1), 9, np.uint8)], axis=2)
    np.testing.assert_array_equal(image_to_rgb8(array_to_image(rgba, "rgba8")), rgb)


def test_mono8_is_repeated_into_three_channels(rng):
    gray = rng.integers(0, 256, (3, 5), dtype=np.uint8)
    rgb = image_to_rgb8(array_to_image(gray, "mono8"))
    assert rgb.shape == (3, 5, 3)
    for channel in range(3):
        np.testing.assert_array_equal(rgb[..., channel], gray)


@pytest.mark.parametrize("bigendian", [False, True])
def test_16uc1_honours_step_padding_and_byte_order(rng, bigendian):
    depth = rng.integers(0, 65536, (4, 5), dtype=np.uint16)
    msg = _padded_message(depth, "16UC1", pad=6, bigendian=bigendian)
    got = image_to_array(msg)
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, depth)


def test_16uc1_scales_to_8bit_with_the_configured_maximum():
    depth = np.array([[0, 1000, 2000, 4000]], dtype=np.uint16)
    rgb = image_to_rgb8(array_to_image(depth, "16UC1"), conversion=ImageConversion(mono_max=2000))
    np.testing.assert_array_equal(rgb[0, :, 0], [0, 128, 255, 255])


def test_rgb8_with_row_padding_drops_the_padding(rng):
    pixels = rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)
    msg = _padded_message(pixels, "rgb8", pad=4)
    assert msg.step == 16
    rgb = image_to_rgb8(msg)
    np.testing.assert_array_equal(rgb, pixels)
    assert rgb.flags.c_contiguous


def test_32fc1_with_nan_inf_and_huge_values_is_converted_without_error():
    depth = np.array([[0.0, 0.5, np.nan, 2.0, np.inf, -np.inf, 1e38, -1e38]], dtype=np.float32)
    with np.errstate(all="raise"):  # no overflow on the way
        rgb = image_to_rgb8(array_to_image(depth, "32FC1"))
    np.testing.assert_array_equal(rgb[0, :, 0], [0, 128, 0, 255, 255, 0, 255, 0])


def test_wrong_size_for_its_encoding_is_a_clear_error(rng):
    msg = array_to_image(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8), "rgb8")
    msg.data = msg.data[:-5]
    with pytest.raises(ImageFormatError, match=r"front: 4x4 rgb8 image with step 12 needs 48 bytes, message has 43"):
        image_to_rgb8(msg, "front")


def test_step_smaller_than_a_row_is_a_clear_error(rng):
    msg = array_to_image(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8), "rgb8")
    msg.step = 10
    with pytest.raises(ImageFormatError, match="step 10 is smaller than one row"):
        image_to_array(msg, "wrist")


def test_unknown_encoding_names_the_supported_ones():
    msg = Image(height=1, width=1, encoding="yuv422", step=2)
    msg.data = array.array("B", [0, 0])
    with pytest.raises(ImageFormatError, match="'yuv422' is not supported; use one of rgb8"):
        image_to_array(msg)


def test_empty_image_is_an_error():
    with pytest.raises(ImageFormatError, match="0x0"):
        image_to_array(Image(encoding="rgb8"))


def test_array_to_image_checks_dtype_and_channels():
    with pytest.raises(ImageFormatError, match="needs uint8"):
        array_to_image(np.zeros((2, 2, 3), np.float32), "rgb8")
    with pytest.raises(ImageFormatError, match="3 channel"):
        array_to_image(np.zeros((2, 2), np.uint8), "rgb8")
