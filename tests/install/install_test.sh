#!/usr/bin/env bash
# install_test (tests/install/CMakeLists.txt sets the environment):
#  1. cmake --install into a temporary prefix; the expected files are there,
#     the unit points at the installed ckptd and flag file, and
#     libckpt_client.so exports the public API only;
#  2. examples/trainer, out of tree, built with find_package(ckpt) (and again
#     with pkg-config), knowing nothing but the prefix;
#  3. the installed ckptd started on a temporary root and socket;
#  4. both trainers save, load and compare every byte;
#  5. cpack -G DEB; dpkg -c lists what an operator needs and no tests.
set -euo pipefail

: "${CKPT_SOURCE_DIR:?}" "${CKPT_BUILD_DIR:?}" "${CMAKE:=cmake}" "${CPACK:=cpack}" "${CXX:=c++}"
test_name=install_test
source "$(dirname "$0")/script_support.sh"

# 1. Install.
prefix=$work/prefix
quiet "$CMAKE" --install "$CKPT_BUILD_DIR" --prefix "$prefix"
# lib, or lib/<multiarch> where the build was configured for /usr.
pc=$(find "$prefix" -path '*/pkgconfig/ckpt.pc' | head -n 1)
[ -n "$pc" ] || fail "cmake --install did not install ckpt.pc"
libdir=$(sed -n 's/^libdir=\${prefix}\///p' "$pc")
for f in bin/ckptd bin/ckptctl bin/ckpt-bench "$libdir"/libckpt_client.so \
    include/ckpt/client.h include/ckpt/types.h \
    "$libdir"/cmake/ckpt/ckptConfig.cmake "$libdir"/cmake/ckpt/ckptConfigVersion.cmake \
    "$libdir"/cmake/ckpt/ckptTargets.cmake "$libdir"/pkgconfig/ckpt.pc \
    lib/systemd/system/ckptd.service etc/ckpt/ckptd.flags \
    lib/sysusers.d/ckptd.conf lib/tmpfiles.d/ckptd.conf; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
unit=$prefix/lib/systemd/system/ckptd.service
grep -q "^ExecStart=$prefix/bin/ckptd .*--flagfile=$prefix/etc/ckpt/ckptd.flags" "$unit" ||
  fail "the installed unit does not start $prefix/bin/ckptd with its flag file: $(grep ExecStart "$unit")"
# Only the public API leaves the library: no proto, gRPC or CUDA symbols.
leaked=$(nm -DC --defined-only "$prefix/$libdir/libckpt_client.so" |
         grep -v -E ' (ckpt::Client::|ckpt::SaveHandle::|(typeinfo|typeinfo name|vtable) for ckpt::(Client|SaveHandle)$)' || true)
[ -z "$leaked" ] || fail "libckpt_client.so exports more than the public API:"$'\n'"$leaked"
say "installed into $prefix"

# 2. The example trainer, out of tree: with find_package(ckpt) ...
quiet "$CMAKE" -S "$CKPT_SOURCE_DIR/examples/trainer" -B "$work/trainer-build" \
  ${CMAKE_GENERATOR:+-G "$CMAKE_GENERATOR"} -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
quiet "$CMAKE" --build "$work/trainer-build"
# ... and with pkg-config.
pc_flags=$(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" pkg-config --cflags --libs ckpt) ||
  fail "pkg-config --cflags --libs ckpt"
# ckpt.pc is relocatable (${pcfiledir}/../..): its -I must reach the
# installed headers wherever the prefix is.
pc_headers=""
for flag in $pc_flags; do
  case "$flag" in -I*) [ -f "${flag#-I}/ckpt/client.h" ] && pc_headers=1 ;; esac
done
[ -n "$pc_headers" ] || fail "pkg-config's -I flags miss ckpt/client.h: $pc_flags"
case " $pc_flags " in *" -lckpt_client "*) ;; *) fail "pkg-config gives no -lckpt_client: $pc_flags" ;; esac
# shellcheck disable=SC2086  # pc_flags is a list of flags
quiet "$CXX" -std=c++20 -O1 "$CKPT_SOURCE_DIR/examples/trainer/trainer.cc" -o "$work/trainer-pc" $pc_flags
say "built the example trainer with find_package(ckpt) and with pkg-config"

# 3. The installed ckptd, on a root and socket of its own.
start_ckptd "$prefix/bin/ckptd" --pool_bytes=$((64 << 20)) --chunk_bytes=65536 --writer_threads=2 \
  --host_name=installtest --listen_address=
say "installed ckptd serving on $work/ckptd.sock"

# 4. Save, load and compare every byte, once per build of the trainer.
"$work/trainer-build/trainer" --socket="$work/ckptd.sock" --job=example-cmake ||
  { cat "$work/ckptd.log" >&2; fail "the trainer built with find_package(ckpt)"; }
LD_LIBRARY_PATH="$prefix/$libdir" "$work/trainer-pc" --socket="$work/ckptd.sock" --job=example-pc ||
  { cat "$work/ckptd.log" >&2; fail "the trainer built with pkg-config"; }
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "ckptd exited with $? on SIGTERM"
daemon_pid=""

# 5. The .deb.
if ! command -v dpkg-deb >/dev/null; then
  say "no dpkg-deb: .deb not checked"
  exit 0
fi
quiet "$CPACK" -G DEB --config "$CKPT_BUILD_DIR/CPackConfig.cmake" -B "$work/pkg"
deb=$(ls "$work"/pkg/ckpt_*.deb)
dpkg -c "$deb" | awk '{print $6}' | sed 's/^\.//' >"$work/deb.list"
for f in /usr/bin/ckptd /usr/bin/ckptctl /usr/bin/ckpt-bench /usr/"$libdir"/libckpt_client.so \
    /usr/include/ckpt/client.h /usr/include/ckpt/types.h \
    /usr/"$libdir"/cmake/ckpt/ckptConfig.cmake /usr/"$libdir"/cmake/ckpt/ckptTargets.cmake \
    /usr/"$libdir"/pkgconfig/ckpt.pc /usr/lib/systemd/system/ckptd.service /etc/ckpt/ckptd.flags \
    /usr/lib/sysusers.d/ckptd.conf /usr/lib/tmpfiles.d/ckptd.conf; do
  grep -qx "$f" "$work/deb.list" || fail "the .deb lacks $f"
done
if grep -E '_test$|fuzz|demo' "$work/deb.list"; then fail "the .deb holds test binaries"; fi
quiet dpkg-deb -x "$deb" "$work/deb-root"
grep -q '^ExecStart=/usr/bin/ckptd .*--flagfile=/etc/ckpt/ckptd.flags' \
  "$work/deb-root/usr/lib/systemd/system/ckptd.service" || fail "the .deb's unit: $(grep ExecStart "$work/deb-root/usr/lib/systemd/system/ckptd.service")"
quiet dpkg-deb -e "$deb" "$work/deb-control"
grep -qx /etc/ckpt/ckptd.flags "$work/deb-control/conffiles" || fail "the flag file is no conffile"
for script in postinst prerm postrm; do
  [ -x "$work/deb-control/$script" ] || fail "the .deb has no $script"
done
depends=$(dpkg-deb -f "$deb" Depends)
case "$depends" in *libgrpc*) ;; *) fail "Depends lacks the runtime libraries: $depends" ;; esac
say "$(basename "$deb"): $(wc -l <"$work/deb.list") entries; Depends: $depends"
