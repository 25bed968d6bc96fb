# strata_add_plugin(<name> <sources>... [OUTPUT_DIRECTORY <dir>])
#
# Builds a Strata backend plugin, libstrata_plugin_<name>.so: a MODULE
# library against the plugin SDK (strata::plugin_sdk: the C ABI header
# strata/plugin/strata_plugin.h and its header-only C++ helpers), with hidden
# symbols except the entry point the plugin exports itself
# (STRATA_PLUGIN_EXPORT), and every symbol resolved at link time
# (-Wl,--no-undefined: a plugin must not depend on the host's symbols). The
# target is strata_plugin_<name>.
#
# Shipped in the SDK (find_package(Strata) provides it) and used by the
# in-tree backends alike. OUTPUT_DIRECTORY defaults to STRATA_PLUGIN_OUTPUT_DIR
# when that is set (the Strata build tree), else the current binary dir.
# Install it with install(TARGETS strata_plugin_<name> LIBRARY DESTINATION
# ${STRATA_PLUGIN_INSTALL_DIR}) — or point plugins.paths / STRATA_PLUGIN_PATH
# at wherever it is.
function(strata_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "" ${ARGN})
  set(target strata_plugin_${name})
  add_library(${target} MODULE ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${target} PRIVATE strata::plugin_sdk)
  if(TARGET strata_warnings)  # the Strata build's own warning set
    target_link_libraries(${target} PRIVATE strata_warnings)
  endif()
  if(ARG_OUTPUT_DIRECTORY)
    set(out "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED STRATA_PLUGIN_OUTPUT_DIR)
    set(out "${STRATA_PLUGIN_OUTPUT_DIR}")
  else()
    set(out "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY "${out}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  # Under clang's sanitizers (Strata's fuzz preset) the runtimes live in the
  # executable, so a plugin's references to them stay undefined until loaded.
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND NOT STRATA_FUZZ)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
endfunction()
