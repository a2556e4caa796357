# Finds Kiln's third-party dependencies: OpenMP, OpenBLAS (its OpenMP build, so that BLAS and
# Kiln's kernels share one thread pool instead of fighting), and SLEEF for vector math.
# Used both by the build and by find_package(Kiln) consumers.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)

if(NOT TARGET kiln_openblas)
  find_path(KILN_CBLAS_INCLUDE_DIR cblas.h
    HINTS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
          /usr/include/openblas)
  find_library(KILN_OPENBLAS_LIBRARY NAMES openblas
    HINTS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp)
  if(NOT KILN_CBLAS_INCLUDE_DIR OR NOT KILN_OPENBLAS_LIBRARY)
    message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/setup.sh "
                        "(apt-get install libopenblas-openmp-dev)")
  endif()
  add_library(kiln_openblas INTERFACE IMPORTED)
  set_target_properties(kiln_openblas PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${KILN_CBLAS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${KILN_OPENBLAS_LIBRARY}")
endif()

if(NOT TARGET kiln_sleef)
  find_path(KILN_SLEEF_INCLUDE_DIR sleef.h HINTS /usr/include/x86_64-linux-gnu)
  find_library(KILN_SLEEF_LIBRARY NAMES sleef)
  if(NOT KILN_SLEEF_INCLUDE_DIR OR NOT KILN_SLEEF_LIBRARY)
    message(FATAL_ERROR "SLEEF not found: run scripts/setup.sh (apt-get install libsleef-dev)")
  endif()
  add_library(kiln_sleef INTERFACE IMPORTED)
  set_target_properties(kiln_sleef PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${KILN_SLEEF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${KILN_SLEEF_LIBRARY}")
endif()
