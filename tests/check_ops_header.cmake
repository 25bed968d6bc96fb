# Fails when core/include/strata/plugin/strata_ops.h differs from what the
# op registry generates (`strata ops --c-header`). Run with -DCLI, -DCONFIG, -DHEADER.
execute_process(COMMAND "${CLI}" ops --c-header --config "${CONFIG}"
                OUTPUT_VARIABLE generated RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata ops --c-header failed (${rc}): ${err}")
endif()
file(READ "${HEADER}" current)
if(NOT generated STREQUAL current)
  message(FATAL_ERROR "${HEADER} is out of date with the op registry; regenerate it with\n"
                      "  cmake --build <build> --target strata_ops_header")
endif()
message(STATUS "strata_ops.h matches the op registry")
