# ot_test_optimization(target): a doctest program compiles at -O1 in the optimized build types.
# What it tests (the libraries and daemons) keeps the build type's -O2; the test code itself only
# has to run, and -O1 takes about 45 % off its compile time (one batch of tests/controld, g++ 12:
# 49.9 s at -O2, 27.6 s at -O1, 28.3 s at -O0), while keeping the warnings that need the
# optimizer's analysis. The load tool and the benches are not test programs: they stay at -O2.
function(ot_test_optimization target)
  if(CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release|MinSizeRel)$")
    # After the build type's flags on the command line, so this -O1 is the one that counts.
    target_compile_options(${target} PRIVATE -O1)
  endif()
endfunction()
