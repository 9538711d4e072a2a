# Debian packages (doc/operations.md §Packages): `cpack -G DEB` in the build directory makes
#   asymnvm         the daemons and tools, the shared libraries they run on, systemd units
#                   (/lib/systemd/system/asymnvm-{backend,mirror,kv}@.service), default
#                   configurations (/etc/asymnvm/*-default.conf, conffiles), the service user
#                   (sysusers.d + postinst) and doc/operations.md;
#   libasymnvm-dev  headers and the CMake package (find_package(AsymNVM)).
# Files with an absolute destination (/etc, /lib/systemd) are EXCLUDE_FROM_ALL: only a component
# install (what CPack does) writes them, never `cmake --install --prefix DIR`.
set(ASYMNVM_PKG ${PROJECT_SOURCE_DIR}/packaging)
# The default configurations are generated from each daemon's --help (packaging/gen-config.py):
# every option, so they cannot drift from the daemons.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(ASYMNVM_CONFIGS)
foreach(d backend mirror kv)
  set(conf ${PROJECT_BINARY_DIR}/packaging/${d}-default.conf)
  add_custom_command(OUTPUT ${conf}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/packaging
    COMMAND ${Python3_EXECUTABLE} ${ASYMNVM_PKG}/gen-config.py $<TARGET_FILE:asymnvm-${d}> ${d} ${conf}
    DEPENDS asymnvm-${d} ${ASYMNVM_PKG}/gen-config.py
    COMMENT "default configuration ${d}-default.conf from asymnvm-${d} --help")
  list(APPEND ASYMNVM_CONFIGS ${conf})
  install(FILES ${ASYMNVM_PKG}/systemd/asymnvm-${d}@.service DESTINATION /lib/systemd/system
    COMPONENT asymnvm EXCLUDE_FROM_ALL)
  install(FILES ${conf} DESTINATION /etc/asymnvm COMPONENT asymnvm EXCLUDE_FROM_ALL)
endforeach()
add_custom_target(asymnvm_default_configs ALL DEPENDS ${ASYMNVM_CONFIGS})
install(FILES ${ASYMNVM_PKG}/debian/sysusers.conf DESTINATION /usr/lib/sysusers.d
  RENAME asymnvm.conf COMPONENT asymnvm EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/doc/operations.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT asymnvm)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME asymnvm)
set(CPACK_PACKAGE_VENDOR "AsymNVM")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "AsymNVM: asymmetric persistent memory back-ends, mirrors and Rowan-KV")
set(CPACK_PACKAGE_CONTACT "AsymNVM maintainers <asymnvm@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL asymnvm dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_ASYMNVM_PACKAGE_NAME asymnvm)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libasymnvm-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# Runtime dependencies from the binaries' ELF needs (dpkg-shlibdeps); the package's own libraries
# are found in its staging tree.
set(CPACK_DEBIAN_ASYMNVM_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_ASYMNVM_PACKAGE_DEPENDS "adduser | systemd")
set(CPACK_DEBIAN_ASYMNVM_PACKAGE_CONTROL_EXTRA
  ${ASYMNVM_PKG}/debian/postinst ${ASYMNVM_PKG}/debian/postrm ${ASYMNVM_PKG}/debian/conffiles)
set(CPACK_DEBIAN_ASYMNVM_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The CMake package's consumers compile against these headers (include/asymnvm includes none of
# the others' headers beyond the standard library, OpenSSL-free).
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "asymnvm (= ${PROJECT_VERSION})")
include(CPack)
