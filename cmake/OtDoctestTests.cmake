# ot_doctest_tests(target PREFIX prefix SOURCES files... [PROPERTIES name value...]): the ctest
# entries of a doctest program.
#
# By default each test case is an entry of its own (doctest_discover_tests), so a failure names
# its case in ctest's summary. With OT_CTEST_PER_FILE=ON each test source file is one entry
# ("<prefix><file>", the program run with --source-file=*/<file>): the sanitizer pass of
# tests/run-all.sh uses it because a process of an ASan+UBSan test program costs 0.15-0.6 s to
# start and to leak-check at exit, paid once per file (166) instead of once per case (~1,200).
# An entry whose filter selects no case fails, so a file that stops matching is not a silent pass.
include(doctest)

function(ot_doctest_tests target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "PREFIX" "SOURCES;PROPERTIES")
  if(NOT OT_CTEST_PER_FILE)
    doctest_discover_tests(${target} TEST_PREFIX "${arg_PREFIX}" PROPERTIES ${arg_PROPERTIES})
    return()
  endif()
  foreach(source IN LISTS arg_SOURCES)
    get_filename_component(file "${source}" NAME)
    set(name "${arg_PREFIX}${file}")
    add_test(NAME "${name}" COMMAND $<TARGET_FILE:${target}> "--source-file=*/${file}")
    # doctest's summary line reads "[doctest] test cases:  0 |  0 passed | ..." when nothing ran.
    set_tests_properties("${name}" PROPERTIES
      FAIL_REGULAR_EXPRESSION "test cases: *0 [|]" ${arg_PROPERTIES})
  endforeach()
endfunction()
