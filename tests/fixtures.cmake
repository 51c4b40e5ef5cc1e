# PyTorch reference cases (included from tests/CMakeLists.txt).
#
#   test_fixtures   runs every case committed in tests/fixtures/
#   fixtures_fresh  regenerates the cases with PyTorch into the build tree
#                   (tools/make_fixtures.py) and runs them; registered only
#                   when TRANSFORMER_PYTHON can import torch and numpy.

set(TRANSFORMER_PYTHON "/usr/bin/python3" CACHE FILEPATH
    "Python interpreter with PyTorch and numpy, for tools/make_fixtures.py")

tfm_add_test(test_fixtures)
target_compile_definitions(test_fixtures PRIVATE
  TFM_FIXTURES_DIR="${CMAKE_CURRENT_LIST_DIR}/fixtures")

set(_tfm_fresh_dir "${CMAKE_CURRENT_BINARY_DIR}/fresh_fixtures")
execute_process(
  COMMAND "${TRANSFORMER_PYTHON}" -c "import torch, numpy"
  RESULT_VARIABLE _tfm_python_rc
  OUTPUT_QUIET ERROR_QUIET)
if(_tfm_python_rc EQUAL 0)
  set(TRANSFORMER_TORCH_FOUND TRUE)
  add_test(NAME fixtures_generate
    COMMAND "${TRANSFORMER_PYTHON}"
            "${PROJECT_SOURCE_DIR}/tools/make_fixtures.py"
            --out "${_tfm_fresh_dir}")
  set_tests_properties(fixtures_generate PROPERTIES
    FIXTURES_SETUP tfm_fresh_fixtures)
  add_test(NAME fixtures_fresh COMMAND test_fixtures "${_tfm_fresh_dir}")
  set_tests_properties(fixtures_fresh PROPERTIES
    FIXTURES_REQUIRED tfm_fresh_fixtures
    ENVIRONMENT "CMOCKA_MESSAGE_OUTPUT=stdout")
else()
  message(STATUS "fixtures_fresh not registered: ${TRANSFORMER_PYTHON} "
                 "cannot import torch and numpy (set TRANSFORMER_PYTHON)")
endif()
unset(_tfm_python_rc)
unset(_tfm_fresh_dir)
