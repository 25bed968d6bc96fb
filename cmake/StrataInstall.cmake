# The install: `cmake --install build/default --prefix DIR` lays out a
# relocatable SDK, the same layout as the build tree:
#
#   bin/strata                          the command line
#   include/strata/...                  public C++ headers; include/strata/plugin/ the plugin SDK
#   lib/libstrata.so*                   the core
#   lib/libstrata_distributed.so*       process groups on Gloo, when built (STRATA_WITH_DISTRIBUTED)
#   lib/strata/plugins/                 the in-tree backend plugins that were built
#   libexec/strata/strata-plugin-probe  the child-process plugin probe
#   share/strata/configs/               default.json and the other shipped configs, the JSON schema
#   share/doc/strata/                   README and docs/
#   lib/cmake/Strata/                   find_package(Strata): targets, strata_add_plugin()
#   lib/pkgconfig/strata.pc, strata-plugin-sdk.pc
#
# The library directory is always `lib`, whatever GNUInstallDirs would pick:
# the core finds its plugins, configs and probe helper relative to
# libstrata.so (../share/strata, ../libexec/strata, ./strata/plugins), so the
# tree works wherever it is moved. Nothing is installed by the tests.
include(CMakePackageConfigHelpers)

file(STRINGS ${PROJECT_SOURCE_DIR}/core/include/strata/plugin/strata_plugin.h _abi REGEX "#define STRATA_ABI_M(AJ|IN)OR ")
string(REGEX MATCH "STRATA_ABI_MAJOR ([0-9]+)" _m "${_abi}")
set(STRATA_ABI_MAJOR ${CMAKE_MATCH_1})
string(REGEX MATCH "STRATA_ABI_MINOR ([0-9]+)" _m "${_abi}")
set(STRATA_ABI_MINOR ${CMAKE_MATCH_1})

set_target_properties(strata_plugin_sdk PROPERTIES EXPORT_NAME plugin_sdk)
install(TARGETS strata strata_plugin_sdk EXPORT StrataTargets
  LIBRARY DESTINATION lib
  ARCHIVE DESTINATION lib
  RUNTIME DESTINATION bin
  INCLUDES DESTINATION include)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/strata DESTINATION include)
if(TARGET strata_distributed)
  # In the same export set: find_package(Strata) then gives strata::distributed.
  install(TARGETS strata_distributed EXPORT StrataTargets
    LIBRARY DESTINATION lib
    INCLUDES DESTINATION include)
  install(FILES ${PROJECT_SOURCE_DIR}/distributed/include/strata/distributed.hpp
                ${PROJECT_SOURCE_DIR}/distributed/include/strata/ddp.hpp
                ${PROJECT_SOURCE_DIR}/distributed/include/strata/zero.hpp
                ${PROJECT_SOURCE_DIR}/distributed/include/strata/checkpointer.hpp
                ${PROJECT_SOURCE_DIR}/distributed/include/strata/sampler.hpp DESTINATION include/strata)
endif()
install(TARGETS strata_plugin_probe RUNTIME DESTINATION libexec/strata)
install(TARGETS strata_cli RUNTIME DESTINATION bin)
foreach(backend cpu vulkan cuda hip)
  if(TARGET strata_plugin_${backend})
    install(TARGETS strata_plugin_${backend} LIBRARY DESTINATION lib/strata/plugins)
  endif()
endforeach()
file(GLOB _configs ${PROJECT_SOURCE_DIR}/configs/*.json)
install(FILES ${_configs} DESTINATION share/strata/configs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION share/doc/strata)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/strata)

install(EXPORT StrataTargets NAMESPACE strata:: DESTINATION lib/cmake/Strata)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/StrataConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/StrataConfig.cmake INSTALL_DESTINATION lib/cmake/Strata)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/StrataConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/StrataConfig.cmake ${PROJECT_BINARY_DIR}/cmake/StrataConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/StrataAddPlugin.cmake
        DESTINATION lib/cmake/Strata)
foreach(pc strata strata-plugin-sdk)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/cmake/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/cmake/${pc}.pc DESTINATION lib/pkgconfig)
endforeach()
