# The Python wheel. scikit-build-core (pyproject.toml) sets SKBUILD and
# installs only the component "python": the shared library, as
# flashc/libflashc.so next to the package's modules, which load it with
# ctypes. One real file, no SONAME links (wheels cannot hold symlinks).
if(SKBUILD)
  install(FILES $<TARGET_FILE:flashc> DESTINATION flashc RENAME libflashc.so
          COMPONENT python)
endif()
