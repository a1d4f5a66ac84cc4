# cmake -DWXTRAIN=<wxtrain> -DCONFIG=<run file> -P zero2_halves_states.cmake
# `wxtrain estimate --json` at world size 1 and at world size 2 under ZeRO-2: gradients and
# optimizer state per rank must halve (to within the padding of the flat buffers to a multiple of
# the world size), while parameters stay whole.
foreach(world 1 2)
  execute_process(COMMAND ${WXTRAIN} estimate -c ${CONFIG} --json --world-size ${world}
                          --set distributed.zero_stage=2 --set train.batch_size=2
                  OUTPUT_VARIABLE json_${world} ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "estimate --world-size ${world} failed (${rc}):\n${json_${world}}\n${err}")
  endif()
  string(JSON ws_${world} GET "${json_${world}}" world_size)
  foreach(key params_bytes grads_bytes optimizer_bytes)
    string(JSON value GET "${json_${world}}" cpu ${key})
    string(REGEX REPLACE "\\.0*$" "" ${key}_${world} "${value}")  # JSON numbers may read 949900.0
  endforeach()
endforeach()
message(STATUS "world 1: params ${params_bytes_1} grads ${grads_bytes_1} optimizer ${optimizer_bytes_1}")
message(STATUS "world 2: params ${params_bytes_2} grads ${grads_bytes_2} optimizer ${optimizer_bytes_2}")
if(NOT ws_2 EQUAL 2)
  message(FATAL_ERROR "--world-size 2 reported world_size ${ws_2}")
endif()
if(NOT params_bytes_1 EQUAL params_bytes_2)
  message(FATAL_ERROR "parameters should stay whole under ZeRO-2: ${params_bytes_1} vs ${params_bytes_2}")
endif()
foreach(key grads_bytes optimizer_bytes)
  math(EXPR twice "2 * ${${key}_2}")
  math(EXPR slack "${${key}_1} / 1000 + 64")  # padding to a multiple of the world size
  math(EXPR diff "${twice} - ${${key}_1}")
  if(diff LESS 0)
    math(EXPR diff "-${diff}")
  endif()
  if(${${key}_1} LESS_EQUAL 0 OR diff GREATER slack)
    message(FATAL_ERROR "${key}: world 1 = ${${key}_1}, world 2 = ${${key}_2}; expected half")
  endif()
endforeach()
message(STATUS "PASS: ZeRO-2 on 2 ranks halves gradients and optimizer state")
