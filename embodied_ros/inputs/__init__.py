"""Layer 1, input adapters: ROS messages -> typed arrays, with clear errors for bad input."""

from embodied_ros.inputs.errors import ImageFormatError, InputError, InstructionError, JointStateError
from embodied_ros.inputs.image import ImageConversion, array_to_image, image_to_array, image_to_rgb8
from embodied_ros.inputs.instruction import instruction_from_msg
from embodied_ros.inputs.joint_state import JointStateSelector
from embodied_ros.inputs.latest import InputBuffer

__all__ = [
    "ImageConversion", "ImageFormatError", "InputBuffer", "InputError", "InstructionError",
    "JointStateError", "JointStateSelector", "array_to_image", "image_to_array", "image_to_rgb8",
    "instruction_from_msg",
]
