# plugin_ops_test: ops a plugin defines through the host services of ABI 2.0
# (tests/plugins/opslib): registration and its refusals, kernels on the
# plugin's own device and on the CPU plugin's (register_kernels), gradients
# of order 1 to 3 and forward mode against finite differences, and the
# errors of the schema and the shape rule. Its configuration loads the CPU
# plugin and the opslib plugin (STRATA_TEST_OPS_PLUGIN_DIR) only. The public
# API has no call of an op by name yet, so it reaches op.hpp and includes
# core/src. Cases are named "plugin_ops.<suite>.<case>" (ctest -R plugin_ops).
if(NOT TARGET strata_opslib_plugin)
  message(STATUS "plugin_ops_test skipped: tests/plugins/opslib is not part of the build")
  return()
endif()
configure_file(plugin-ops-config.json.in ${CMAKE_CURRENT_BINARY_DIR}/plugin-ops-config.json @ONLY)
# The same with the "error" policy for strata::mul (PluginOpsErrorPolicy).
configure_file(plugin-ops-error-config.json.in ${CMAKE_CURRENT_BINARY_DIR}/plugin-ops-error-config.json @ONLY)
add_executable(plugin_ops_test plugin_ops_test.cpp)
target_link_libraries(plugin_ops_test PRIVATE strata::strata strata_gtest_main strata_warnings)
target_include_directories(plugin_ops_test PRIVATE ${PROJECT_SOURCE_DIR}/core/src)
target_compile_definitions(plugin_ops_test PRIVATE
  STRATA_PLUGIN_OPS_CONFIG="${CMAKE_CURRENT_BINARY_DIR}/plugin-ops-config.json"
  STRATA_PLUGIN_OPS_ERROR_CONFIG="${CMAKE_CURRENT_BINARY_DIR}/plugin-ops-error-config.json")
add_dependencies(plugin_ops_test strata_opslib_plugin)
foreach(dep strata_plugin_cpu strata_configs)
  if(TARGET ${dep})
    add_dependencies(plugin_ops_test ${dep})
  endif()
endforeach()
strata_discover_tests(plugin_ops_test TEST_PREFIX "plugin_ops." DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS plugins)

# plugin_oplib_test: the same ops from "opslibonly", a plugin that serves no
# device (an op library): it is loaded, lists its ops, and they run and
# differentiate on cpu:0 through the kernels it registered there.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/plugin-oplib-config.json
  "{\"plugins\": {\"paths\": [\"${STRATA_PLUGIN_OUTPUT_DIR}\", \"${STRATA_TEST_OPLIB_PLUGIN_DIR}\"], \"disabled\": [\"vulkan\", \"cuda\", \"hip\"]},
    \"prefer\": [\"cpu\"], \"fallback\": {\"policy\": \"error\"}, \"logging\": {\"level\": \"error\"}}\n")
add_executable(plugin_oplib_test plugin_oplib_test.cpp)
target_link_libraries(plugin_oplib_test PRIVATE strata::strata strata_gtest_main strata_warnings)
target_compile_definitions(plugin_oplib_test PRIVATE
  STRATA_PLUGIN_OPLIB_CONFIG="${CMAKE_CURRENT_BINARY_DIR}/plugin-oplib-config.json")
add_dependencies(plugin_oplib_test strata_opslib_plugin)
foreach(dep strata_plugin_cpu strata_configs)
  if(TARGET ${dep})
    add_dependencies(plugin_oplib_test ${dep})
  endif()
endforeach()
strata_discover_tests(plugin_oplib_test TEST_PREFIX "plugin_ops." DISCOVERY_MODE PRE_TEST PROPERTIES LABELS plugins)
