# Writes the linker version script of the shared library: the functions declared in
# the public headers are global, everything else (host/'s internal clattn_* helpers
# included) is local. Generated from the headers at build time, so a function added to
# include/clattn.h, clattn_backward.h, clattn_tuning.h or clattn_mods.h is exported
# without a second list to keep in step.
#   cmake -DHEADERS=include/clattn.h,include/clattn_backward.h -DOUT=clattn.map -P version_script.cmake
# A declaration starts a line with its return type and names the function before its
# '(' on that line; comment lines start with ' ' or '/' and are skipped.
string(REPLACE "," ";" _headers "${HEADERS}")
set(_decls "")
foreach(_h ${_headers})
  file(STRINGS "${_h}" _d REGEX "^[A-Za-z_][A-Za-z0-9_ ]*[ *]clattn_[a-z0-9_]+\\(")
  list(APPEND _decls ${_d})
endforeach()
string(REGEX MATCHALL "clattn_[a-z0-9_]+\\(" _calls "${_decls}")
set(_names "")
foreach(_c ${_calls})
  string(REPLACE "(" "" _n "${_c}")
  list(APPEND _names "${_n}")
endforeach()
list(REMOVE_DUPLICATES _names)
list(SORT _names)
if(NOT _names)
  message(FATAL_ERROR "${HEADERS} declare no clattn_* function")
endif()
set(_body "/* Generated from the public headers by cmake/version_script.cmake; do not edit. */\n{\n  global:\n")
foreach(_n ${_names})
  string(APPEND _body "    ${_n};\n")
endforeach()
string(APPEND _body "  local:\n    *;\n};\n")
# Rewrite only on change, so an edit of a comment in the header does not relink.
if(EXISTS "${OUT}")
  file(READ "${OUT}" _old)
  if(_old STREQUAL _body)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${_body}")
