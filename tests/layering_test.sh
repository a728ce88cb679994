#!/usr/bin/env bash
# Layering, checked on every #include "..." of the tree: what each layer may
# reach. A violation prints the file, the line and the rule, and fails.
#   proto/   the wire and its pure helpers: nothing of ours above it
#   gpu/     the GPU runtime interface: proto/ only
#   client/  what ranks link: proto/, gpu/ and its own (never daemon/)
#   agent/   the Python binding: client/ (public headers), proto/
#   daemon/  everything but client/, agent/, tools/ and tests/, and inside it:
#     storage/, pool/, metrics/, peer/  the floor: nothing of daemon/ but their own
#     coordinator/  planning, commit, catalog: storage/ below it
#     tier/         which store holds a step, the memory tier: coordinator/, storage/
#     auth/         who may call: coordinator/ (job directories), storage/
#     cluster/      the coordinator's services: auth/, coordinator/, storage/
#     server/       the sessions and wiring: all of the above
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
check daemon/storage 'daemon/storage|proto|ckpt/v1'
check daemon/pool 'daemon/pool|proto|ckpt/v1'
check daemon/metrics 'daemon/metrics|proto|ckpt/v1'
check daemon/peer 'daemon/peer|proto|ckpt/v1'
check daemon/coordinator 'daemon/(coordinator|storage)|proto|ckpt/v1'
check daemon/tier 'daemon/(tier|coordinator|storage)|proto|ckpt/v1'
check daemon/auth 'daemon/(auth|coordinator|storage)|proto|ckpt/v1'
check daemon/cluster 'daemon/(cluster|auth|coordinator|storage)|proto|ckpt/v1'
if [ "$status" -eq 0 ]; then echo "layering: ok"; fi
exit "$status"
