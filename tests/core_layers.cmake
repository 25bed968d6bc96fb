# core_layers.cmake — fails when a file of the core includes an internal
# header of a higher layer (core/CMakeLists.txt lists the layers; this map
# must agree with it). Run by CTest as `core_layering`:
#
#   cmake -DSOURCE_DIR=<repo>/core/src -P tests/core_layers.cmake
#
# A file's layer is its folder: base/ < runtime/ < ops/ < autograd/ < nn/
# and io/, and inside runtime/ the sub-layers device/ < tensor/ < dispatch/
# < plugins/ < the files directly in runtime/ (the device manager). A file
# outside every folder fails. Public headers (core/include) are the API of
# every layer and are not checked. An include is resolved as the compiler
# does: next to the including file first, then from core/src.
cmake_minimum_required(VERSION 3.25)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "core_layers.cmake: pass -DSOURCE_DIR=<repo>/core/src")
endif()

# Bottom up; a file's level is the index of the first folder its path starts with.
set(LAYER_FOLDERS base/ runtime/device/ runtime/tensor/ runtime/dispatch/ runtime/plugins/ runtime/ ops/ autograd/ nn/
                  io/)
set(NN_LEVEL 8)  # nn/ and io/ share the top level

# The level of a path relative to core/src, or -1 when no folder holds it.
function(layer_of path out)
  set(level 0)
  foreach(folder IN LISTS LAYER_FOLDERS)
    string(LENGTH "${folder}" n)
    string(SUBSTRING "${path}" 0 ${n} head)
    if(head STREQUAL folder)
      if(level GREATER NN_LEVEL)
        set(level ${NN_LEVEL})
      endif()
      set(${out} ${level} PARENT_SCOPE)
      return()
    endif()
    math(EXPR level "${level} + 1")
  endforeach()
  set(${out} -1 PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/*.cpp ${SOURCE_DIR}/*.hpp)
list(SORT files)
set(violations "")
set(checked 0)
set(outside "")
foreach(file IN LISTS files)
  layer_of(${file} from)
  if(from EQUAL -1)
    string(APPEND outside "  ${file}\n")
    continue()
  endif()
  list(GET LAYER_FOLDERS ${from} from_name)
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
    if(to EQUAL -1)
      continue()  # reported as a file outside every folder
    endif()
    list(GET LAYER_FOLDERS ${to} to_name)
    if(to GREATER from)
      string(APPEND violations "  ${file} (${from_name}) includes ${target} (${to_name})\n")
    elseif(from EQUAL NN_LEVEL AND NOT target MATCHES "^(nn|io)/")
      string(APPEND violations "  ${file} (nn) includes the internal ${target}: nn and io use public headers only\n")
    endif()
  endforeach()
endforeach()

string(REPLACE ";" " < " order "${LAYER_FOLDERS}")
string(REPLACE "nn/ < io/" "nn/ and io/" order "${order}")
if(outside)
  message(FATAL_ERROR "core layering: files in no layer folder (${order}):\n${outside}"
                      "Move each into the folder of its layer.")
endif()
if(checked EQUAL 0)
  message(FATAL_ERROR "core_layers.cmake: no #include read under ${SOURCE_DIR}")
endif()
if(violations)
  message(FATAL_ERROR "core layering: includes that run up a layer (${order}):\n"
                      "${violations}Move the code down, or reach the higher layer through a hook "
                      "(core/src/runtime/dispatch/dispatch_hooks.hpp), or hand it down (a resolver, a listener).")
endif()
message(STATUS "core layering: ${checked} includes checked, none runs up a layer")
