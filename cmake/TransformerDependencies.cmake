# Dependencies, found through pkg-config (Debian: libopenblas-dev,
# libcjson-dev, libpcre2-dev, libutf8proc-dev, libcmocka-dev).  Each becomes an imported target PkgConfig::X.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(CJSON REQUIRED IMPORTED_TARGET libcjson)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
find_library(MATH_LIBRARY m REQUIRED)
find_package(Threads REQUIRED)
if(TRANSFORMER_BUILD_TESTS)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()
