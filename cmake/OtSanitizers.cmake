# OT_SANITIZE applies ASan + UBSan to everything built here (our code, llhttp, generated protos),
# so a report points at the real frame. UBSan findings abort: a test that trips one fails.
if(OT_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# OT_FUZZ builds each tests/fuzz target with libFuzzer's driver; without it the same targets link
# a small driver that replays their seed corpus, so the corpora run under ctest in every build.
if(OT_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "OT_FUZZ needs clang (libFuzzer): configure with CXX=clang++ CC=clang")
endif()
