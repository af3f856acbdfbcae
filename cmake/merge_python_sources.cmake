# cmake -DSOURCE_DIR=... -DDESTINATION_DIR=... -P merge_python_sources.cmake
# Copies the project's Python sources over the generated interface package, leaving out what the
# in-place message build of a development checkout may have put there (msg/ and compiled extensions).
file(COPY "${SOURCE_DIR}/" DESTINATION "${DESTINATION_DIR}"
  PATTERN "__pycache__" EXCLUDE
  PATTERN "*.pyc" EXCLUDE
  PATTERN "*.so" EXCLUDE
  PATTERN "_embodied_ros_s.*" EXCLUDE
  REGEX "/msg$" EXCLUDE
)
