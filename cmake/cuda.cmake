# Resolve FLASHC_CUDA (AUTO/ON/OFF) into FLASHC_WITH_CUDA. The CUDA backend's
# kernels live in src/cuda; until they are there, the library is CPU-only and
# a CUDA tensor gets FLASHC_ERROR_UNSUPPORTED.
set(FLASHC_WITH_CUDA OFF)
file(GLOB FLASHC_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/cuda/*.cu)
if(NOT FLASHC_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER AND FLASHC_CUDA_SOURCES)
    set(FLASHC_WITH_CUDA ON)
    # Real code for Ampere (sm_80) and Hopper (sm_90), plus PTX for newer
    # GPUs, which the driver compiles at load time.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
  elseif(FLASHC_CUDA STREQUAL "ON")
    if(NOT CMAKE_CUDA_COMPILER)
      message(FATAL_ERROR "FLASHC_CUDA=ON but no CUDA compiler (nvcc) was found")
    else()
      message(FATAL_ERROR "FLASHC_CUDA=ON but this version has no CUDA kernels in src/cuda")
    endif()
  endif()
endif()
message(STATUS "flashc CUDA backend: ${FLASHC_WITH_CUDA} (FLASHC_CUDA=${FLASHC_CUDA})")
