# pkgconfig.cmake — writes the pkg-config files (cmake/*.pc.in) at install
# time, so that their prefix is the one installed into: the configured
# CMAKE_INSTALL_PREFIX, or `cmake --install ... --prefix DIR`. Run from the
# install script (install(CODE) in CMakeLists.txt), which sets
# SHARDCAST_PC_TEMPLATES (the .pc.in files), SHARDCAST_PC_OUT (where the
# .pc files are written before install(FILES) installs them), PC_VERSION and
# the configured CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR (relative
# to the prefix, or absolute) as SHARDCAST_PC_LIBDIR and
# SHARDCAST_PC_INCLUDEDIR.
set(PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${SHARDCAST_PC_${kind}}")
    set(PC_${kind} "${SHARDCAST_PC_${kind}}")
  else()
    set(PC_${kind} "\${prefix}/${SHARDCAST_PC_${kind}}")
  endif()
endforeach()
file(MAKE_DIRECTORY "${SHARDCAST_PC_OUT}")
foreach(template ${SHARDCAST_PC_TEMPLATES})
  get_filename_component(name "${template}" NAME)
  string(REGEX REPLACE "\\.in$" "" name "${name}")
  configure_file("${template}" "${SHARDCAST_PC_OUT}/${name}" @ONLY)
endforeach()
