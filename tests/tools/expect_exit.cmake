# cmake -DKILN=path -DARGS="a|b|c" -DEXPECT_STATUS=N -DEXPECT_STDERR=text -P expect_exit.cmake
# Runs the kiln binary and fails unless it exits with exactly EXPECT_STATUS (a crash reports a
# signal name instead of a number, so it fails too) and its stderr contains EXPECT_STDERR.
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${KILN}" ${args}
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT "${status}" STREQUAL "${EXPECT_STATUS}")
  message(FATAL_ERROR "kiln ${args}: exit status '${status}', expected ${EXPECT_STATUS}\n"
                      "stdout:\n${out}\nstderr:\n${err}")
endif()
string(FIND "${err}" "${EXPECT_STDERR}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "kiln ${args}: stderr lacks '${EXPECT_STDERR}':\n${err}")
endif()
message(STATUS "kiln ${args}: exit ${status} as expected")
