# core_layers.cmake — fails when a file of the core includes an internal
# header of a higher layer (core/CMakeLists.txt lists the layers; this map
# must agree with it). Run by CTest as `core_layering`:
#
#   cmake -DSOURCE_DIR=<repo>/core/src -P tests/core_layers.cmake
#
# A file's layer comes from its path; public headers (core/include) are the
# API of every layer and are not checked. An include is resolved as the
# compiler does: next to the including file first, then from core/src.
cmake_minimum_required(VERSION 3.25)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "core_layers.cmake: pass -DSOURCE_DIR=<repo>/core/src")
endif()

set(LAYER_NAMES base runtime ops autograd nn)

# The layer (0 = base ... 4 = nn) of a path relative to core/src.
function(layer_of path out)
  if(path MATCHES "^(nn|io)/")
    set(${out} 4 PARENT_SCOPE)
  elseif(path MATCHES "^autograd/" OR path MATCHES "^amp(\\.cpp|_internal\\.hpp)$")
    set(${out} 3 PARENT_SCOPE)
  elseif(path MATCHES "^ops/")
    set(${out} 2 PARENT_SCOPE)
  elseif(path MATCHES "^(dtype\\.cpp|logging\\.(cpp|hpp)|pool\\.hpp|config[_a-z]*\\.(cpp|hpp))$")
    set(${out} 0 PARENT_SCOPE)
  else()
    set(${out} 1 PARENT_SCOPE)
  endif()
endfunction()

file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/*.cpp ${SOURCE_DIR}/*.hpp)
list(SORT files)
set(violations "")
set(checked 0)
foreach(file IN LISTS files)
  layer_of(${file} from)
  list(GET LAYER_NAMES ${from} from_name)
  get_filename_component(dir ${file} DIRECTORY)
  file(STRINGS ${SOURCE_DIR}/${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
    math(EXPR checked "${checked} + 1")
    # Resolve: next to the file, then from core/src.
    if(dir AND EXISTS ${SOURCE_DIR}/${dir}/${inc})
      set(target ${dir}/${inc})
    elseif(EXISTS ${SOURCE_DIR}/${inc})
      set(target ${inc})
    else()
      continue()  # not an internal header (a generated or third-party one)
    endif()
    cmake_path(NORMAL_PATH target)
    layer_of(${target} to)
    list(GET LAYER_NAMES ${to} to_name)
    if(to GREATER from)
      string(APPEND violations "  ${file} (${from_name}) includes ${target} (${to_name})\n")
    elseif(from EQUAL 4 AND NOT target MATCHES "^(nn|io)/")
      string(APPEND violations "  ${file} (nn) includes the internal ${target}: nn and io use public headers only\n")
    endif()
  endforeach()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "core_layers.cmake: no #include read under ${SOURCE_DIR}")
endif()
if(violations)
  message(FATAL_ERROR "core layering: includes that run up a layer (base < runtime < ops < autograd < nn):\n"
                      "${violations}Move the code down, or reach the higher layer through a hook "
                      "(core/src/dispatch_hooks.hpp).")
endif()
message(STATUS "core layering: ${checked} includes checked, none runs up a layer")
