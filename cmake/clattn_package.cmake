# Shared library, install rules, CMake package, pkg-config file and CPack (DEB, TGZ).
# Included from the top-level CMakeLists.txt after the `clattn` (static) target.
#
# In the build tree `clattn` stays the static library the tests and tools link.
# `clattn_shared` is built from the same sources with OUTPUT_NAME clattn
# (libclattn.so.<SOVERSION>), and exports only the functions the public header declares
# (a linker version script generated from include/clattn.h; host/'s internal clattn_*
# helpers stay local).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

option(CLATTN_BUILD_SHARED "Build the shared library libclattn.so too" ON)
option(CLATTN_INSTALL "Generate the install rules (cmake --install)" ON)

# SOVERSION: while the major version is 0, a minor release may change the ABI (0.2
# appended fields to clattn_attention_desc, which the caller allocates), so the SONAME
# carries MAJOR.MINOR (libclattn.so.0.2); from 1.0 on it is MAJOR alone.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(CLATTN_SOVERSION "${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}")
else()
  set(CLATTN_SOVERSION "${PROJECT_VERSION_MAJOR}")
endif()

set(_clattn_targets clattn)
set_target_properties(clattn PROPERTIES EXPORT_NAME clattn_static)
add_library(clattn::clattn_static ALIAS clattn)

if(CLATTN_BUILD_SHARED)
  get_target_property(_clattn_sources clattn SOURCES)
  set(_clattn_map "${CMAKE_CURRENT_BINARY_DIR}/clattn.map")
  add_custom_command(
    OUTPUT "${_clattn_map}"
    COMMAND ${CMAKE_COMMAND}
            "-DHEADERS=${CMAKE_CURRENT_SOURCE_DIR}/include/clattn.h,${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_backward.h,${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_tuning.h,${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_mods.h"
            "-DOUT=${_clattn_map}" -P "${CMAKE_CURRENT_SOURCE_DIR}/cmake/version_script.cmake"
    DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn.h"
            "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_backward.h"
            "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_tuning.h"
            "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_mods.h"
            "${CMAKE_CURRENT_SOURCE_DIR}/cmake/version_script.cmake"
    COMMENT "Writing the shared library's version script from the public headers" VERBATIM)
  add_custom_target(clattn_version_script DEPENDS "${_clattn_map}")

  add_library(clattn_shared SHARED ${_clattn_sources})
  add_dependencies(clattn_shared clattn_version_script clattn_kernel_sources)
  target_include_directories(clattn_shared PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/host)
  target_compile_definitions(clattn_shared PUBLIC $<BUILD_INTERFACE:CL_TARGET_OPENCL_VERSION=120>)
  target_link_libraries(clattn_shared PUBLIC OpenCL::OpenCL PRIVATE Threads::Threads m)
  target_link_options(clattn_shared PRIVATE "LINKER:--version-script=${_clattn_map}")
  if(NOT CLATTN_SANITIZE) # sanitizer runtimes resolve at program link time
    target_link_options(clattn_shared PRIVATE "LINKER:--no-undefined")
  endif()
  set_target_properties(clattn_shared PROPERTIES
    OUTPUT_NAME clattn EXPORT_NAME clattn LINK_DEPENDS "${_clattn_map}")
  if(NOT SKBUILD) # a wheel holds one plain libclattn.so (zip files have no symlinks)
    set_target_properties(clattn_shared PROPERTIES
      VERSION ${PROJECT_VERSION} SOVERSION ${CLATTN_SOVERSION})
  endif()
  add_library(clattn::clattn ALIAS clattn_shared)
  list(APPEND _clattn_targets clattn_shared)
else()
  add_library(clattn::clattn ALIAS clattn)
endif()

if(SKBUILD)
  # the wheel: libclattn.so inside the package folder, where
  # python/src/clattn/_lib.py loads it; no headers, CMake or pkg-config files
  install(TARGETS clattn_shared LIBRARY DESTINATION clattn)
  return()
endif()
if(NOT CLATTN_INSTALL)
  return()
endif()

install(TARGETS ${_clattn_targets} EXPORT clattnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn.h"
              "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_backward.h"
              "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_kvcache.h"
              "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_mods.h"
              "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_multi.h"
              "${CMAKE_CURRENT_SOURCE_DIR}/include/clattn_tuning.h"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET clattn_cli)
  install(TARGETS clattn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(_clattn_cmakedir "${CMAKE_INSTALL_LIBDIR}/cmake/clattn")
install(EXPORT clattnTargets NAMESPACE clattn:: FILE clattnTargets.cmake
        DESTINATION ${_clattn_cmakedir})
configure_package_config_file(
  "${CMAKE_CURRENT_SOURCE_DIR}/cmake/clattnConfig.cmake.in"
  "${CMAKE_CURRENT_BINARY_DIR}/clattnConfig.cmake"
  INSTALL_DESTINATION ${_clattn_cmakedir})
# SameMinorVersion: find_package(clattn 0.2) accepts 0.2.x only. Before 1.0 a minor
# release may break the API and ABI (see SOVERSION above), so AnyNewerVersion would
# accept a 0.3 that no longer builds or runs the caller. Revisit at 1.0 (SameMajorVersion).
write_basic_package_version_file(
  "${CMAKE_CURRENT_BINARY_DIR}/clattnConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/clattnConfig.cmake"
              "${CMAKE_CURRENT_BINARY_DIR}/clattnConfigVersion.cmake"
        DESTINATION ${_clattn_cmakedir})

# pkg-config, relocatable: prefix is ${pcfiledir} plus the way back from the
# pkgconfig folder (../.. for lib/pkgconfig, ../../.. for lib/<multiarch>/pkgconfig).
set(_clattn_pcdir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(CLATTN_PC_PREFIX_FROM_PCDIR "")
  set(CLATTN_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(CLATTN_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH CLATTN_PC_PREFIX_FROM_PCDIR "/p/${_clattn_pcdir}" "/p")
  string(REGEX REPLACE "/$" "" CLATTN_PC_PREFIX_FROM_PCDIR "${CLATTN_PC_PREFIX_FROM_PCDIR}")
  set(CLATTN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(CLATTN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file("${CMAKE_CURRENT_SOURCE_DIR}/cmake/clattn.pc.in"
               "${CMAKE_CURRENT_BINARY_DIR}/clattn.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/clattn.pc" DESTINATION ${_clattn_pcdir})

# `cpack -G DEB` (or `cpack` for DEB and TGZ) in the build folder, top-level builds only.
if(CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
  set(CPACK_PACKAGE_NAME clattn)
  set(CPACK_PACKAGE_VENDOR "clattn")
  set(CPACK_PACKAGE_CONTACT "clattn maintainers")
  set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Scaled dot-product attention on OpenCL devices")
  set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
  set(CPACK_GENERATOR "DEB;TGZ")
  set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
  set(CPACK_DEBIAN_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON) # libc6, the OpenCL ICD loader
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "pocl-opencl-icd | opencl-icd")
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "ocl-icd-opencl-dev, opencl-headers")
  set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
  include(CPack)
endif()
