# What `cmake --install` puts in a prefix from the whole build (the runtime's
# own part is in runtime/CMakeLists.txt):
#   bin/      partita, partita-opt, partita-translate (and partita-run)
#   lib/      libpartita_runtime.so, libpartita_plan.so (versioned), the
#             compiler's static libraries, cmake/Partita/ (the package)
#   include/partita/runtime/  the runtime's public API, plan/plan.pb.h
#   include/partita/{dialects,passes}/  the compiler's headers (and their
#             TableGen'd .h.inc), included by their repository paths
# Test-only libraries (test/lib) are built, not installed.

# Every library under dialects/ and passes/ is part of the compiler; found by
# walking those folders, so a new library is installed and exported without
# a list to keep in step.
function(partita_collect_libraries dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  set(found)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC|SHARED|INTERFACE)_LIBRARY$")
      list(APPEND found ${target})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir ${subdirs})
    partita_collect_libraries(${subdir} sub)
    list(APPEND found ${sub})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

partita_collect_libraries(${PROJECT_SOURCE_DIR}/dialects dialect_libs)
partita_collect_libraries(${PROJECT_SOURCE_DIR}/passes pass_libs)
set(PARTITA_COMPILER_LIBRARIES ${dialect_libs} ${pass_libs})

# Partita::compiler: every compiler library, with the include folder their
# headers expect ("dialects/...", "passes/...").
add_library(partita_compiler INTERFACE)
add_library(Partita::compiler ALIAS partita_compiler)
set_target_properties(partita_compiler PROPERTIES EXPORT_NAME compiler)
target_link_libraries(partita_compiler INTERFACE ${PARTITA_COMPILER_LIBRARIES})
target_include_directories(partita_compiler INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/partita>)
target_compile_features(partita_compiler INTERFACE cxx_std_17)
install(TARGETS ${PARTITA_COMPILER_LIBRARIES} partita_compiler
  EXPORT PartitaCompilerTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

foreach(dir dialects passes)
  install(DIRECTORY ${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/partita
    FILES_MATCHING PATTERN "*.h")
  install(DIRECTORY ${PROJECT_BINARY_DIR}/${dir}
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/partita
    FILES_MATCHING PATTERN "*.h.inc"
    PATTERN CMakeFiles EXCLUDE)
endforeach()

install(TARGETS partita partita-opt partita-translate
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

include(cmake/PartitaPackage.cmake)
partita_install_package()
