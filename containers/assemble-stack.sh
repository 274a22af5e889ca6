#!/usr/bin/env bash
# Builds containers/rollwire.Containerfile, the file users build with docker, where no container daemon runs and
# nothing may be pulled (CI): the stack image (target stack) and the reference agent's rollout image (target
# rollout), with buildah. Two things a daemon would fetch come from this machine instead:
#   - the base image (PYTHON_IMAGE): Debian bookworm with its python3, made by mmdebstrap from Debian's packages;
#   - the wheels: this machine's pip (its index settings) fetches torch and rollwire's dependencies into a
#     wheelhouse, which the build's pip installs from alone (the Containerfile's WHEELS).
#   containers/assemble-stack.sh OUT [TAG [ROLLOUT_TAG]]      (as root; needs mmdebstrap and buildah from Debian)
# Leaves OUT/oci (both images, an OCI layout: TAG, default rollwire:dev, and ROLLOUT_TAG, default
# rollout-reference:dev) and OUT/rootfs (the stack image's files). Push with `skopeo copy oci:OUT/oci:TAG docker://...`.
set -euo pipefail
out=$(realpath -m "${1:?usage: assemble-stack.sh OUT [TAG [ROLLOUT_TAG]]}")
tag=${2:-rollwire:dev}
rollout_tag=${3:-rollout-reference:dev}
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
base=localhost/rollwire-assembly-base:bookworm
mkdir -p "$out"

"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "assemble-stack: $python is not Python 3.11 (Debian bookworm's python3)" >&2; exit 2; }
# overlay where it mounts (each layer a diff); else vfs, which copies the whole tree for every layer (on a 2-core
# machine the whole assembly took 1.7x as long, with ~17 GB of storage at its peak). STORAGE_DRIVER chooses.
storage_for() { storage=(--root "$out/storage" --runroot "$out/run" --storage-driver "$1"); }
overlay_mounts() {
  local probe
  probe=$(buildah "${storage[@]}" from scratch 2>/dev/null) || return 1
  buildah "${storage[@]}" mount "$probe" >/dev/null 2>&1; local mounted=$?
  buildah "${storage[@]}" rm "$probe" >/dev/null 2>&1
  return $mounted
}
if [ -n "${STORAGE_DRIVER:-}" ]; then
  storage_for "$STORAGE_DRIVER"
else
  storage_for overlay
  overlay_mounts || { rm -rf "$out/storage" "$out/run"; storage_for vfs; }
fi
echo "assemble-stack: buildah storage driver ${storage[-1]}"
trap 'rm -rf "$out/storage" "$out/run" "$out/base" "$out/wheels"' EXIT

echo "assemble-stack: the base image (Debian bookworm's python3, from mmdebstrap)"
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$out/base"
ctr=$(buildah "${storage[@]}" from scratch)
buildah "${storage[@]}" copy --quiet "$ctr" "$out/base" / >/dev/null
buildah "${storage[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 --cmd /bin/bash "$ctr"
buildah "${storage[@]}" commit --quiet --rm "$ctr" "$base" >/dev/null

echo "assemble-stack: the wheelhouse (torch and rollwire's dependencies, from this machine's pip)"
torch_version=${TORCH_VERSION:-2.13.0}  # the Containerfile's TORCH_VERSION: the wheelhouse and the build agree
"$python" -m pip wheel --quiet --wheel-dir "$out/wheels" "torch==$torch_version" "$repo[postgres]" \
  "setuptools>=69" wheel

for target in stack rollout; do
  name=$tag && [ "$target" = rollout ] && name=$rollout_tag
  echo "assemble-stack: containers/rollwire.Containerfile, target $target, as $name"
  buildah "${storage[@]}" build --quiet --isolation chroot --layers --target "$target" \
    --build-arg PYTHON_IMAGE="$base" --build-arg TORCH_VERSION="$torch_version" \
    --build-arg WHEELS=/wheels --volume "$out/wheels:/wheels:ro" \
    -f "$repo/containers/rollwire.Containerfile" -t "$name" "$repo" >/dev/null
  buildah "${storage[@]}" push --quiet --disable-compression "$name" "oci:$out/oci:$name"
done

ctr=$(buildah "${storage[@]}" from "$tag")  # the stack image's files, for a look without a container runtime
rm -rf "$out/rootfs" && cp -a "$(buildah "${storage[@]}" mount "$ctr")" "$out/rootfs"
buildah "${storage[@]}" rm "$ctr" >/dev/null
echo "assembled $tag and $rollout_tag in $out/oci"
