# Installs the client for trainers: libckpt_client.so, the public headers, a
# CMake package (find_package(ckpt) -> ckpt::client) and ckpt.pc. Both the
# package and ckpt.pc are relocatable: they find the prefix from where they
# lie, so `cmake --install --prefix <anywhere>` and the .deb work alike.
include(CMakePackageConfigHelpers)

set(CKPT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ckpt)
set(CKPT_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(TARGETS ckpt_client_shared EXPORT ckptTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/ckpt/client.h include/ckpt/types.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ckpt)

install(EXPORT ckptTargets NAMESPACE ckpt:: DESTINATION ${CKPT_CMAKE_DIR})
configure_package_config_file(cmake/ckptConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/ckptConfig.cmake INSTALL_DESTINATION ${CKPT_CMAKE_DIR})
# 0.x: a minor release may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ckptConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ckptConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/ckptConfigVersion.cmake DESTINATION ${CKPT_CMAKE_DIR})

# ckpt.pc names its prefix relative to its own directory (${pcfiledir}).
file(RELATIVE_PATH CKPT_PC_TO_PREFIX /${CKPT_PKGCONFIG_DIR} /)
string(REGEX REPLACE "/$" "" CKPT_PC_TO_PREFIX "${CKPT_PC_TO_PREFIX}")
configure_file(cmake/ckpt.pc.in ${CMAKE_CURRENT_BINARY_DIR}/ckpt.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ckpt.pc DESTINATION ${CKPT_PKGCONFIG_DIR})
