# Compiles the numba CPU kernels of the installed Python package at install time, so that the first
# node start after `colcon build` loads them from numba's cache instead of compiling them.
#
# numba keeps a kernel's cache in the __pycache__ folder beside the kernel's source file, keyed by
# that file's modification time and size, and uses it only where that folder is writable. So the
# kernels are compiled from the installed files themselves (the install space's site-packages first
# on PYTHONPATH), whether they are copies or, with --symlink-install, links: the cache lands in the
# install space, next to the files the nodes import. A reinstall with unchanged kernels finds the
# cache and takes a second or two; a changed kernel file is recompiled.
# The shipped bundles are warmed up too: a model calls some kernels with read-only (memory-mapped)
# weights, a variant numba compiles separately.
function(embodied_ros_install_kernel_cache python_executable python_install_dir)
  file(GLOB _bundles "${CMAKE_CURRENT_SOURCE_DIR}/bundles/*.gguf")
  list(JOIN _bundles "', '" _bundle_list)
  if(IS_ABSOLUTE "${python_install_dir}")
    set(_site "${python_install_dir}")
  else()
    set(_site "${CMAKE_INSTALL_PREFIX}/${python_install_dir}")
  endif()
  install(CODE "
    message(STATUS \"Compiling the CPU kernels into numba's cache in ${_site}/${PROJECT_NAME}/kernels\")
    execute_process(
      COMMAND \"${CMAKE_COMMAND}\" -E env \"PYTHONPATH=\$ENV{DESTDIR}${_site}\"
        \"${python_executable}\" -c
        \"from embodied_ros.nodes.runtime_cache import compile_kernel_cache; compile_kernel_cache(['${_bundle_list}'])\"
      RESULT_VARIABLE _kernel_cache_result)
    if(NOT _kernel_cache_result EQUAL 0)
      message(FATAL_ERROR \"compiling the CPU kernels failed (see above); configure with \"
        \"-DEMBODIED_ROS_KERNEL_CACHE=OFF to install without the cache\")
    endif()
  ")
endfunction()
