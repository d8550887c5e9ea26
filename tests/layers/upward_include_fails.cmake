# The layer check (cmake/check_layers.cmake) on a copy of src/ with two includes that break the
# layers: one upward (model includes train) and one concrete backend header above the backend
# (engine includes backend/cpu/); and two spellings that would slip past a check of quoted
# paths from src/: <core/error.h> in angle brackets and "../train/trainer.h". The check must fail
# and name all four, file and line; on the untouched copy it must pass. Run by ctest:
# cmake -DSOURCE_DIR=<repo> -DWORK=<dir> -P <this>.
cmake_minimum_required(VERSION 3.25)
# The number of a file's last line, where an appended include lands.
function(last_line path out)
  file(READ ${path} text)
  string(REGEX MATCHALL "\n" newlines "${text}")
  list(LENGTH newlines n)
  set(${out} ${n} PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
file(COPY ${SOURCE_DIR}/src DESTINATION ${WORK})
set(check ${CMAKE_COMMAND} -DSRC=${WORK}/src -DSTAMP=${WORK}/stamp
  -P ${SOURCE_DIR}/cmake/check_layers.cmake)

execute_process(COMMAND ${check} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the layer check fails on the untouched sources:\n${err}")
endif()

file(APPEND ${WORK}/src/model/config.cpp "#include \"train/trainer.h\"\n")
file(APPEND ${WORK}/src/engine/engine.cpp "#include \"backend/cpu/cpu_backend.h\"\n")
file(APPEND ${WORK}/src/optim/adamw.cpp "#include <core/error.h>\n")
file(APPEND ${WORK}/src/reward/answer_match.cpp "#  include \"../train/trainer.h\"\n")
execute_process(COMMAND ${check} RESULT_VARIABLE rc ERROR_VARIABLE err)
string(REGEX REPLACE "[ \n]+" " " err "${err}")  # CMake wraps its messages
if(rc EQUAL 0)
  message(FATAL_ERROR "the layer check passed an upward include")
endif()
file(READ ${WORK}/src/model/config.cpp config_text)  # the appended line is the last
string(REGEX MATCHALL "\n" config_newlines "${config_text}")
list(LENGTH config_newlines config_n)
last_line(${WORK}/src/optim/adamw.cpp adamw_n)
last_line(${WORK}/src/reward/answer_match.cpp answer_n)
foreach(expected
    "src/model/config.cpp:${config_n}: includes train/trainer.h: layer 'model' may include only: model, backend, core"
    "includes backend/cpu/cpu_backend.h: above the backend only its contract"
    "src/optim/adamw.cpp:${adamw_n}: includes <core/error.h>: a header of src/ is spelled with quotes"
    "src/reward/answer_match.cpp:${answer_n}: includes ../train/trainer.h: a relative path")
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the layer check's error lacks \"${expected}\":\n${err}")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
message(STATUS "upward includes and unchecked spellings refused by name")
