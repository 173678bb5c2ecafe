# ot_warnings(target): the warning set for our own code. Third-party code (llhttp, generated
# protobuf sources) is compiled without it, so -Werror applies only to what we write.
function(ot_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
    -Wunused -Woverloaded-virtual -Wconversion -Wsign-conversion
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wmisleading-indentation -Wduplicated-cond
      -Wduplicated-branches -Wlogical-op -Wuseless-cast)
  else()
    # g++ 12 reports -Wnull-dereference inside libstdc++ (std::string, istreambuf_iterator) at -O2,
    # false positives we cannot fix in our code; clang's version of the check is precise.
    target_compile_options(${target} PRIVATE -Wnull-dereference)
  endif()
  if(OT_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
