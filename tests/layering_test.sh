#!/usr/bin/env bash
# Layering, checked on every #include "..." of the tree: what each layer may
# reach. A violation prints the file, the line and the rule, and fails.
#   proto/   the wire and its pure helpers: nothing of ours above it
#   gpu/     the GPU runtime interface: proto/ only
#   client/  what ranks link: proto/, gpu/ and its own (never daemon/)
#   agent/   the Python binding: client/ (public headers), proto/
#   daemon/  everything but client/, agent/, tools/ and tests/, and inside it
#            (docs/design.md, "The map"):
#     fault/, codec/, pool/, metrics/, peer/  the floor: nothing of
#                   daemon/ but their own
#     storage/      backends and the chunk reader: fault/ (fault points),
#                   codec/ (decoding what it reads)
#     planning/     pure planning and the MANIFEST codec: proto/ only
#     exec/         the pools: storage/, codec/ (the writers encode), fault/
#     coordinator/  catalog, gathering, commit: planning/, storage/, fault/
#     tier/         which store holds a step, the memory tier, its checks
#                   and transfers: coordinator/, planning/, storage/, peer/,
#                   exec/, fault/
#     auth/         who may call: storage/ (job directories), never the
#                   coordinator
#     cluster/      the coordinator's services: auth/, coordinator/,
#                   planning/, storage/
#     session/      the sessions: all of the above, never service/
#     service/      the RPC service and its wiring: everything
# The build enforces the same (per-library include roots, CMakeLists.txt
# ckpt_library_headers): this test names the rule that a failing build
# only implies.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
check() {  # check DIR ALLOWED_PREFIX_REGEX
  local dir=$1 allowed=$2
  while IFS= read -r hit; do
    local included
    included=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${hit#*:*:}")
    # Only our own layers are checked (absl/, grpcpp/, ... are libraries).
    [[ "$included" =~ ^(proto|gpu|client|agent|daemon|tools|tests)/ ]] || continue
    if ! [[ "$included" =~ ^($allowed)/ ]]; then
      echo "layering: $hit: $dir/ may include only $allowed" >&2
      status=1
    fi
  done < <(grep -rn --include='*.cc' --include='*.h' --include='*.cu' '#include "' "$dir" || true)
}
check proto 'proto|ckpt/v1'
check gpu 'gpu|proto|ckpt/v1'
check client 'client|proto|gpu|ckpt/v1|ckpt'
check agent 'client|proto|ckpt/v1|ckpt'
check daemon 'daemon|proto|gpu|ckpt/v1'
check daemon/fault 'daemon/fault|proto|ckpt/v1'
check daemon/storage 'daemon/(storage|fault|codec)|proto|ckpt/v1'
check daemon/pool 'daemon/pool|proto|ckpt/v1'
check daemon/metrics 'daemon/metrics|proto|ckpt/v1'
check daemon/peer 'daemon/peer|proto|ckpt/v1'
check daemon/codec 'daemon/codec|proto|ckpt/v1'
check daemon/planning 'daemon/planning|proto|ckpt/v1'
check daemon/exec 'daemon/(exec|storage|codec|fault)|proto|ckpt/v1'
check daemon/coordinator 'daemon/(coordinator|planning|storage|fault)|proto|ckpt/v1'
check daemon/tier 'daemon/(tier|coordinator|planning|storage|peer|exec|fault)|proto|ckpt/v1'
check daemon/auth 'daemon/(auth|storage)|proto|ckpt/v1'
check daemon/cluster 'daemon/(cluster|auth|coordinator|planning|storage)|proto|ckpt/v1'
check daemon/session 'daemon/(session|tier|coordinator|planning|storage|peer|exec|codec|fault|auth|cluster|pool|metrics)|proto|gpu|ckpt/v1'
# The tools link no session or service: ckptctl reads checkpoints with the
# catalog, the planners and the chunk reader alone.
check tools/ckptctl 'tools|client|daemon/(coordinator|planning|storage)|proto|ckpt/v1|ckpt'
# No folder of daemon/ holds more than a quarter of its lines: a folder that
# grows past that is two rooms and should say so (issue 30).
total=$(find daemon -name '*.cc' -o -name '*.h' | xargs cat | wc -l)
for dir in daemon/*/; do
  lines=$(find "$dir" -name '*.cc' -o -name '*.h' | xargs -r cat | wc -l)
  if [ $((lines * 4)) -gt "$total" ]; then
    echo "layering: $dir holds $lines of daemon/'s $total lines, more than a quarter" >&2
    status=1
  fi
done
# An errno is spelled in one place: strerror is not thread-safe, and a code
# picked by hand beside it drifts from ErrnoToCode's table.
if grep -rnE --include='*.cc' --include='*.h' --include='*.cu' '(^|[^_[:alnum:]])strerror(_r)?\(' \
    daemon client proto tools gpu agent tests examples | grep -v '^proto/lib/status_context\.' >&2; then
  echo "layering: strerror above: use ErrnoStatus or ErrnoMessage (proto/lib/status_context.h)" >&2
  status=1
fi
if [ "$status" -eq 0 ]; then echo "layering: ok"; fi
exit "$status"
