# ABI 2.0 behaviour tests (included from tests/runtime/CMakeLists.txt): how
# the core handles the behaviour plugins of tests/plugins/behaviour — a
# deferred failure, a lost device, a device that is not free-threaded, a
# kernel asking for workspace, kernels, allocations and copies that fail on
# demand (abi_fault_test.cpp), a kernel that takes groups (abi_group_test.cpp).
#
# Plugin options are read once, at a plugin's init, so the three workspace
# sizes need three processes: abi_behaviour_test (512 KiB, within wsp's 1 MiB
# limit; also asyncfail, lostdev, serial), abi_behaviour_wsp_over_limit_test
# (2 MiB, over it) and abi_behaviour_wsp_huge_test (SIZE_MAX - 1, which must
# not wrap), one source built three times.
if(TARGET strata_behaviour_plugins)
  set(BEHAVIOUR_WSP_BYTES 524288)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/behaviour-config.json.in
                 ${CMAKE_CURRENT_BINARY_DIR}/behaviour.json @ONLY)
  set(BEHAVIOUR_WSP_BYTES 2097152)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/behaviour-config.json.in
                 ${CMAKE_CURRENT_BINARY_DIR}/behaviour-wsp-over-limit.json @ONLY)
  set(BEHAVIOUR_WSP_BYTES 18446744073709551614)  # SIZE_MAX - 1
  configure_file(${CMAKE_CURRENT_LIST_DIR}/behaviour-config.json.in
                 ${CMAKE_CURRENT_BINARY_DIR}/behaviour-wsp-huge.json @ONLY)

  foreach(variant abi_behaviour_test abi_behaviour_wsp_over_limit_test abi_behaviour_wsp_huge_test)
    strata_add_test(${variant} LABEL plugins ${CMAKE_CURRENT_LIST_DIR}/abi_behaviour_test.cpp)
    target_include_directories(${variant} PRIVATE ${PROJECT_SOURCE_DIR}/tests/plugins/behaviour)
    target_link_libraries(${variant} PRIVATE ${CMAKE_DL_LIBS})
    target_compile_definitions(${variant} PRIVATE
      STRATA_TEST_BEHAVIOUR_PLUGIN_DIR="${STRATA_TEST_BEHAVIOUR_PLUGIN_DIR}")
    add_dependencies(${variant} strata_behaviour_plugins)
  endforeach()
  # The faulty plugin's tests (exception safety under injected faults) need
  # no options of their own: one process is enough.
  target_sources(abi_behaviour_test PRIVATE ${CMAKE_CURRENT_LIST_DIR}/abi_fault_test.cpp
                                            ${CMAKE_CURRENT_LIST_DIR}/abi_group_test.cpp)
  target_compile_definitions(abi_behaviour_test PRIVATE
    STRATA_BEHAVIOUR_CONFIG="${CMAKE_CURRENT_BINARY_DIR}/behaviour.json")
  target_compile_definitions(abi_behaviour_wsp_over_limit_test PRIVATE
    STRATA_BEHAVIOUR_CONFIG="${CMAKE_CURRENT_BINARY_DIR}/behaviour-wsp-over-limit.json"
    STRATA_BEHAVIOUR_WSP_OVER_LIMIT)
  target_compile_definitions(abi_behaviour_wsp_huge_test PRIVATE
    STRATA_BEHAVIOUR_CONFIG="${CMAKE_CURRENT_BINARY_DIR}/behaviour-wsp-huge.json"
    STRATA_BEHAVIOUR_WSP_HUGE)
  # Threads: the serial device under eight threads, and the plugins'
  # worker threads (asynccopy's staged copies, asyncfail's deferred failure).
  strata_threads_cases(abi_behaviour_test "Behaviour.SerialDevice*:Behaviour.Staged*:AsyncFail.*")
else()
  message(STATUS "tests/runtime/behaviour.cmake skipped: tests/plugins/behaviour is not part of the build")
endif()
