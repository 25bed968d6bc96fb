# The skip check on made-up outcomes (CTest "expected_skips_selftest"):
#   cmake -DCHECK=<check_skips> -DWORK=<scratch folder> -P selftest.cmake
# Each case writes a results folder and a list, runs the check and requires
# its exit code and a line of its output. Conditions are ones this script can
# rely on anywhere: a library that cannot exist is missing, libc is not.
cmake_minimum_required(VERSION 3.25)

set(ABSENT "library-missing libstrata-selftest-absent.so.9")
set(PRESENT "library-missing libc.so.6")

# run_case(<name> <expected exit> <expected output regex> <list json> <tsv lines>...)
function(run_case name expected_rc expected_output list_json)
  set(dir "${WORK}/${name}")
  file(REMOVE_RECURSE "${dir}")
  file(MAKE_DIRECTORY "${dir}/results")
  string(JOIN "\n" rows ${ARGN})
  string(REPLACE "<SEMI>" ";" rows "${rows}")  # a ";" in a row would split the list
  file(WRITE "${dir}/results/prog.1.tsv" "${rows}\n")
  file(WRITE "${dir}/list.json" "${list_json}")
  execute_process(COMMAND "${CHECK}" "${dir}/list.json" "${dir}/results" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expected_rc OR NOT "${out}${err}" MATCHES "${expected_output}")
    message(FATAL_ERROR "case ${name}: exit ${rc} (expected ${expected_rc}), output:\n${out}${err}\n"
                        "expected to match: ${expected_output}")
  endif()
  message(STATUS "case ${name}: exit ${rc} as expected")
endfunction()

set(T "\t")
set(skip_row "prog${T}A.B${T}skipped${T}no widget here${T}1")

run_case(listed_skip_passes 0 "every skip is on the list"
  "{\"skips\": [{\"tests\": \"prog:A.B\", \"when\": \"${ABSENT}\", \"why\": \"w\"}]}" "${skip_row}")

run_case(skip_whose_condition_fails 1 "UNEXPECTED SKIP prog:A.B: no widget here"
  "{\"skips\": [{\"tests\": \"prog:A.B\", \"when\": \"${PRESENT}\", \"why\": \"w\"}]}" "${skip_row}")

run_case(unlisted_skip 1 "UNEXPECTED SKIP prog:A.B"
  "{\"skips\": [{\"tests\": \"prog:Other.*\", \"when\": \"${ABSENT}\", \"why\": \"w\"}]}" "${skip_row}")

run_case(listed_skip_that_ran 1 "STOPPED SKIPPING prog:A.B"
  "{\"skips\": [{\"tests\": \"prog:A.*\", \"when\": \"${ABSENT}\", \"why\": \"w\"}]}"
  "prog${T}A.B${T}passed${T}${T}1")

# Each part of a reason needs an entry: f64 is listed, i32 is not.
run_case(every_part_needs_an_entry 1 "UNEXPECTED DTYPES LEFT OUT prog:Devices/S.C/cpu_0: cpu:0 does not store i32"
  "{\"skips\": [{\"tests\": \"*\", \"reason\": \"does not store f64\", \"when\": \"${ABSENT}\", \"why\": \"w\"}]}"
  "prog${T}Devices/S.C/cpu_0${T}passed${T}dtypes: cpu:0 does not store f64<SEMI> cpu:0 does not store i32${T}1")

# cpu:0 is available: skipping both of a suite's two cases there fails,
# even with every skip listed.
run_case(available_device_ran_nothing 1 "NOTHING RAN prog:Devices/S on cpu:0"
  "{\"skips\": [{\"tests\": \"prog:Devices/*\", \"when\": \"${ABSENT}\", \"why\": \"w\"}]}"
  "prog${T}Devices/S.X/cpu_0${T}skipped${T}r${T}2" "prog${T}Devices/S.Y/cpu_0${T}skipped${T}r${T}2")

# $device is the case's device: cpu:0 stores f64, so its f64 skip is not excused.
run_case(device_condition_from_the_case 1 "UNEXPECTED SKIP prog:Devices/S.X/cpu_0"
  "{\"skips\": [{\"tests\": \"*\", \"reason\": \"does not store f64\", \"when\": \"device-lacks $device f64\", \"why\": \"w\"}]}"
  "prog${T}Devices/S.X/cpu_0${T}skipped${T}cpu:0 does not store f64${T}2" "prog${T}Devices/S.Y/cpu_0${T}passed${T}${T}2")

run_case(unknown_condition 2 "unknown condition \"sunny\""
  "{\"skips\": [{\"tests\": \"prog:A.B\", \"when\": \"sunny\", \"why\": \"w\"}]}" "${skip_row}")
