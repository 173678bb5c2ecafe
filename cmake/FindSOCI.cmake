# Debian's libsoci-dev ships headers and shared libraries but no CMake config, so we locate them
# ourselves. Defines SOCI::core, SOCI::sqlite3 and SOCI::mysql.
find_path(SOCI_INCLUDE_DIR soci/soci.h)
find_library(SOCI_CORE_LIBRARY NAMES soci_core)
find_library(SOCI_SQLITE3_LIBRARY NAMES soci_sqlite3)
find_library(SOCI_MYSQL_LIBRARY NAMES soci_mysql)
find_path(MYSQL_INCLUDE_DIR mysql.h PATH_SUFFIXES mysql mariadb)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SOCI REQUIRED_VARS SOCI_INCLUDE_DIR SOCI_CORE_LIBRARY
  SOCI_SQLITE3_LIBRARY SOCI_MYSQL_LIBRARY MYSQL_INCLUDE_DIR)

if(SOCI_FOUND AND NOT TARGET SOCI::core)
  add_library(SOCI::core UNKNOWN IMPORTED)
  set_target_properties(SOCI::core PROPERTIES IMPORTED_LOCATION "${SOCI_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${SOCI_INCLUDE_DIR}")
  add_library(SOCI::sqlite3 UNKNOWN IMPORTED)
  set_target_properties(SOCI::sqlite3 PROPERTIES IMPORTED_LOCATION "${SOCI_SQLITE3_LIBRARY}"
    INTERFACE_LINK_LIBRARIES "SOCI::core;SQLite::SQLite3")
  add_library(SOCI::mysql UNKNOWN IMPORTED)
  set_target_properties(SOCI::mysql PROPERTIES IMPORTED_LOCATION "${SOCI_MYSQL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${MYSQL_INCLUDE_DIR}" INTERFACE_LINK_LIBRARIES "SOCI::core")
endif()
mark_as_advanced(SOCI_INCLUDE_DIR SOCI_CORE_LIBRARY SOCI_SQLITE3_LIBRARY SOCI_MYSQL_LIBRARY
  MYSQL_INCLUDE_DIR)
