#!/usr/bin/env bash
# Assembles the stack image, and the reference agent's rollout image, without a container daemon (where
# `docker build` cannot run): a Debian root filesystem from mmdebstrap, rollwire and its dependencies installed
# into it by this machine's pip (the same Python minor version as Debian's python3), then buildah from scratch +
# copy + config + commit to an OCI layout, once with the task suites (the stack) and once without (the rollout
# image). Entrypoint and user match containers/rollwire.Containerfile (`rollwire`, uid 10001).
#   containers/assemble-stack.sh OUT [TAG [ROLLOUT_TAG]]      (as root; needs mmdebstrap and buildah from Debian)
# Leaves OUT/rootfs (the stack image's files) and OUT/oci (the images: TAG, default rollwire:dev, and
# ROLLOUT_TAG, default rollout-reference:dev).
set -euo pipefail
out=$(realpath -m "${1:?usage: assemble-stack.sh OUT [TAG [ROLLOUT_TAG]]}")
tag=${2:-rollwire:dev}
rollout_tag=${3:-rollout-reference:dev}
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
root="$out/rootfs"
site=/opt/rollwire/site
mkdir -p "$out"

"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "assemble-stack: $python is not Python 3.11 (Debian bookworm's python3)" >&2; exit 2; }
mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates bookworm "$root"
"$python" -m pip install --quiet --no-compile --no-warn-script-location --target "$root$site" \
  "torch==${TORCH_VERSION:-2.13.0}" "$repo[postgres]"
# pip wrote this machine's interpreter into the scripts; the image runs Debian's
sed -i "1s|^#!.*python.*$|#!/usr/bin/python3|" "$root$site"/bin/*
ln -sf "$site/bin/rollwire" "$root/usr/local/bin/rollwire"
echo "rollwire:x:10001:10001::/tmp/home:/usr/sbin/nologin" >> "$root/etc/passwd"
echo "rollwire:x:10001:" >> "$root/etc/group"

storage=(--root "$out/storage" --runroot "$out/run" --storage-driver vfs)
commit() {  # commit TAG: the root filesystem as it is now, as an image tagged TAG
  local ctr
  ctr=$(buildah "${storage[@]}" from scratch)
  buildah "${storage[@]}" copy --quiet "$ctr" "$root" / >/dev/null
  buildah "${storage[@]}" config --entrypoint '["rollwire"]' --cmd '--help' --user 10001:10001 --workingdir /tmp \
    --env PATH=/usr/local/bin:/usr/bin:/bin --env PYTHONPATH="$site" --env HOME=/tmp/home \
    --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 "$ctr"
  buildah "${storage[@]}" commit --quiet --rm --disable-compression --format oci "$ctr" "oci:$out/oci:$1" >/dev/null
}
suites="$root$site/rollwire/mcp_servers/tasks/suites"
held="$out/suites-held"
trap 'if [ -d "$held" ]; then rm -rf "$suites" && mv "$held" "$suites"; fi; rm -rf "$out/storage" "$out/run"' EXIT
commit "$tag"
mv "$suites" "$held"  # the rollout image: the same files less the suites, then the root filesystem as it was
commit "$rollout_tag"
echo "assembled $tag and $rollout_tag in $out/oci"
