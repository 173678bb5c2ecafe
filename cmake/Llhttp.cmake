# llhttp comes from Debian's node-llhttp as C sources (/usr/share/llhttp) and one header
# (/usr/share/include/llhttp); we compile them into a static library without our warning flags.
find_path(LLHTTP_INCLUDE_DIR llhttp.h PATHS /usr/share/include/llhttp NO_DEFAULT_PATH)
find_path(LLHTTP_SOURCE_DIR llhttp.c PATHS /usr/share/llhttp NO_DEFAULT_PATH)
if(NOT LLHTTP_INCLUDE_DIR OR NOT LLHTTP_SOURCE_DIR)
  message(FATAL_ERROR "llhttp sources not found: install node-llhttp (deploy/install-deps.sh)")
endif()
add_library(ot_llhttp STATIC
  ${LLHTTP_SOURCE_DIR}/llhttp.c ${LLHTTP_SOURCE_DIR}/api.c ${LLHTTP_SOURCE_DIR}/http.c)
target_include_directories(ot_llhttp SYSTEM PUBLIC ${LLHTTP_INCLUDE_DIR})
# Its three files are not written to be compiled as one (unity builds).
set_target_properties(ot_llhttp PROPERTIES POSITION_INDEPENDENT_CODE ON UNITY_BUILD OFF)
