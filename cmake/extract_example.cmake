# Copies the C code block between <!-- example:begin --> and <!-- example:end --> of
# README to OUT, so the README's example is compiled by every build.
file(READ "${README}" _readme)
string(FIND "${_readme}" "<!-- example:begin -->" _b)
string(FIND "${_readme}" "<!-- example:end -->" _e)
if(_b EQUAL -1 OR _e EQUAL -1)
  message(FATAL_ERROR "README.md has no <!-- example:begin/end --> block")
endif()
math(EXPR _len "${_e} - ${_b}")
string(SUBSTRING "${_readme}" ${_b} ${_len} _block)
string(REGEX REPLACE "^.*```c\n" "" _block "${_block}")
string(REGEX REPLACE "```.*$" "" _block "${_block}")
file(WRITE "${OUT}" "${_block}")
