# run_check.cmake — runs the real `strata plugin check` once and checks what
# a user sees: the exit code (and that it is an exit, not a signal), lines
# of the output, the last line, and (JSON) that the output parses.
#
#   cmake -DCLI=<strata> -DARGS=<;-list of arguments> -DEXPECT_EXIT=<n>
#         [-DEXPECT="<regex>;<regex>..."] [-DLAST_LINE=<regex>] [-DJSON=ON]
#         -P run_check.cmake
foreach(var CLI ARGS EXPECT_EXIT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_check.cmake: ${var} is not set")
  endif()
endforeach()

execute_process(COMMAND ${CLI} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(JOIN " " shown ${ARGS})
set(context "strata ${shown}\n--- stdout:\n${out}\n--- stderr:\n${err}")

# A number is an exit status; anything else ("Segmentation fault", "Child
# aborted") means the checker itself died.
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the checker did not exit in order (${rc})\n${context}")
endif()
if(NOT rc EQUAL EXPECT_EXIT)
  message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_EXIT}\n${context}")
endif()

set(all "${out}\n${err}")
foreach(pattern IN LISTS EXPECT)
  if(NOT all MATCHES "${pattern}")
    message(FATAL_ERROR "no match for \"${pattern}\"\n${context}")
  endif()
endforeach()

if(DEFINED LAST_LINE)
  string(STRIP "${out}" stripped)
  string(REGEX REPLACE ".*\n" "" last "${stripped}")
  if(NOT last MATCHES "${LAST_LINE}")
    message(FATAL_ERROR "last line \"${last}\" does not match \"${LAST_LINE}\"\n${context}")
  endif()
endif()

if(JSON)
  string(JSON failed ERROR_VARIABLE json_error GET "${out}" totals failed)
  if(json_error)
    message(FATAL_ERROR "--json output does not parse or has no totals.failed: ${json_error}\n${context}")
  endif()
  string(JSON n_cases LENGTH "${out}" cases)
  string(JSON device GET "${out}" device id)
  string(JSON matrix_type TYPE "${out}" matrix)
  if(n_cases LESS 1 OR device STREQUAL "" OR NOT matrix_type STREQUAL "OBJECT")
    message(FATAL_ERROR "--json output lacks cases, device or matrix\n${context}")
  endif()
  if(DEFINED JSON_FAILED AND NOT failed EQUAL JSON_FAILED)
    message(FATAL_ERROR "totals.failed is ${failed}, expected ${JSON_FAILED}\n${context}")
  endif()
endif()
