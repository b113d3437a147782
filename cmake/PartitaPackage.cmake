# Installs Partita's CMake package (lib/cmake/Partita): the exported targets
# and PartitaConfig.cmake, so an embedder writes
#   find_package(Partita REQUIRED)
#   target_link_libraries(app PRIVATE Partita::runtime)   # or Partita::compiler
# Called once, by the top level of whichever project is being configured (the
# whole build, or the runtime-only one, which provides Partita::runtime only).
include(CMakePackageConfigHelpers)

function(partita_install_package)
  set(package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Partita)
  install(EXPORT PartitaRuntimeTargets NAMESPACE Partita::
    DESTINATION ${package_dir})
  if(TARGET partita_compiler)
    set(PARTITA_WITH_COMPILER ON)
    install(EXPORT PartitaCompilerTargets NAMESPACE Partita::
      DESTINATION ${package_dir})
  else()
    set(PARTITA_WITH_COMPILER OFF)
  endif()
  configure_package_config_file(
    ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/PartitaConfig.cmake.in
    ${CMAKE_BINARY_DIR}/cmake/PartitaConfig.cmake
    INSTALL_DESTINATION ${package_dir})
  # Before 1.0 a minor release may break the API: same major.minor only.
  write_basic_package_version_file(
    ${CMAKE_BINARY_DIR}/cmake/PartitaConfigVersion.cmake
    VERSION ${PARTITA_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES
    ${CMAKE_BINARY_DIR}/cmake/PartitaConfig.cmake
    ${CMAKE_BINARY_DIR}/cmake/PartitaConfigVersion.cmake
    DESTINATION ${package_dir})
endfunction()
