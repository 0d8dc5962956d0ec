# Resolve FLASHC_BUILD_TESTS (AUTO/ON/OFF) into FLASHC_WITH_TESTS and, when
# the C suite is built, the link target FLASHC_CMOCKA. The library, the CLI
# and the benchmark need no test framework, so AUTO (the default) builds the
# suite only where cmocka is found; ON fails without it; OFF skips it.
#
# cmocka is looked up through pkg-config, then in the system and
# CMAKE_PREFIX_PATH directories (scripts/gpu_check.sh points the prefix
# path at a copied header and library).
set(FLASHC_WITH_TESTS OFF)
string(TOUPPER "${FLASHC_BUILD_TESTS}" _flashc_tests_mode)
if(NOT _flashc_tests_mode STREQUAL "AUTO")
  # any CMake truth value (ON, TRUE, 1, YES) means ON, the rest OFF
  if(FLASHC_BUILD_TESTS)
    set(_flashc_tests_mode ON)
  else()
    set(_flashc_tests_mode OFF)
  endif()
endif()
if(NOT _flashc_tests_mode STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(CMOCKA QUIET IMPORTED_TARGET cmocka)
  endif()
  if(TARGET PkgConfig::CMOCKA)
    set(FLASHC_CMOCKA PkgConfig::CMOCKA)
  else()
    find_library(FLASHC_CMOCKA_LIBRARY cmocka)
    find_path(FLASHC_CMOCKA_INCLUDE cmocka.h)
    if(FLASHC_CMOCKA_LIBRARY AND FLASHC_CMOCKA_INCLUDE)
      add_library(flashc_cmocka INTERFACE)
      target_link_libraries(flashc_cmocka INTERFACE ${FLASHC_CMOCKA_LIBRARY})
      target_include_directories(flashc_cmocka INTERFACE ${FLASHC_CMOCKA_INCLUDE})
      set(FLASHC_CMOCKA flashc_cmocka)
    endif()
  endif()
  if(FLASHC_CMOCKA)
    set(FLASHC_WITH_TESTS ON)
  elseif(_flashc_tests_mode STREQUAL "ON")
    message(FATAL_ERROR "FLASHC_BUILD_TESTS=ON but cmocka was not found: install it (Debian: "
                        "apt-get install libcmocka-dev, or bash scripts/install_deps.sh), or "
                        "configure with -DFLASHC_BUILD_TESTS=AUTO or OFF")
  else()
    message(STATUS "flashc C test suite: skipped, cmocka not found (apt-get install libcmocka-dev, "
                   "or bash scripts/install_deps.sh, then configure again)")
  endif()
endif()
if(FLASHC_WITH_TESTS)
  message(STATUS "flashc C test suite: ON (FLASHC_BUILD_TESTS=${FLASHC_BUILD_TESTS})")
endif()
