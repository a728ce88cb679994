# Runs at install time (install(SCRIPT) in deploy/CMakeLists.txt): only then
# is the prefix known (cmake --install --prefix, CPack's /usr). Installs the
# unit with ExecStart and --flagfile pointing at the installed ckptd and flag
# file, and the flag file itself, under the prefix's etc: /etc for /usr
# (as GNUInstallDirs does), <prefix>/etc otherwise.
# In: CKPT_DEPLOY_DIR (deploy/), CKPT_BINDIR, CKPT_STAGE_DIR (build tree).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(sysconfdir /etc)
else()
  set(sysconfdir ${CMAKE_INSTALL_PREFIX}/etc)
endif()

file(READ ${CKPT_DEPLOY_DIR}/ckptd.service unit)
# The unit in the tree names the default /usr/local install; say so loudly
# if that changes rather than install a unit that starts the wrong binary.
foreach(path /usr/local/bin/ckptd /etc/ckpt/ckptd.flags)
  string(FIND "${unit}" "${path}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "deploy/ckptd.service no longer names ${path}; update deploy/install_unit.cmake")
  endif()
endforeach()
string(REPLACE /usr/local/bin/ckptd ${CMAKE_INSTALL_PREFIX}/${CKPT_BINDIR}/ckptd unit "${unit}")
string(REPLACE /etc/ckpt/ckptd.flags ${sysconfdir}/ckpt/ckptd.flags unit "${unit}")
file(WRITE ${CKPT_STAGE_DIR}/ckptd.service "${unit}")

# file(INSTALL) adds $DESTDIR and records the files in install_manifest.txt.
file(INSTALL ${CKPT_STAGE_DIR}/ckptd.service
  DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/systemd/system
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL ${CKPT_DEPLOY_DIR}/ckptd.flags DESTINATION ${sysconfdir}/ckpt
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
