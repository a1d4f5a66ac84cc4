# cmake -DMPIEXEC=... -DPROBE=... -P expect_abort.cmake
# Passes when the two-rank probe exits non-zero, within the timeout, naming the rank and its error.
execute_process(
  COMMAND ${MPIEXEC} -np 2 --allow-run-as-root --oversubscribe ${PROBE}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output
  TIMEOUT 60)
message(STATUS "exit: ${result}\n${output}")
if(result STREQUAL "0" OR result MATCHES "timeout")
  message(FATAL_ERROR "the job did not come down with an error (exit: ${result})")
endif()
if(NOT output MATCHES "rank 1: injected failure in the training step")
  message(FATAL_ERROR "the output does not name rank 1 and its error")
endif()
