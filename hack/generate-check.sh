#!/usr/bin/env bash
# Fails when what `make generate` commits is not what controller-gen generates from
# apis/v1alpha1's types now: the deepcopy code, the OffloadTenant CRD in manifests/crds/
# (and listed in its kustomization) and its copy in the chart's crds/. controller-gen runs
# into a temporary directory, so nothing in the tree changes.
#
#   CONTROLLER_TOOLS_VERSION=v0.19.0 hack/generate-check.sh   # make lint runs it
#
# controller-gen is built with `go run module@version` (Go's build cache keeps it: about
# 40 s the first time, a second after), never added to the project's go.mod.
set -euo pipefail

version=${CONTROLLER_TOOLS_VERSION:?set CONTROLLER_TOOLS_VERSION (the Makefile pins it)}
go=${GO:-go}
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$go" run "sigs.k8s.io/controller-tools/cmd/controller-gen@$version" \
  object paths=./apis/v1alpha1/... output:object:dir="$tmp/object" \
  crd:crdVersions=v1 output:crd:dir="$tmp/crd" paths=./apis/v1alpha1/...

status=0
stale() {
  printf 'generate-check: %s\n' "$1" >&2
  status=1
}

# -N: a file one side lacks shows as wholly added or removed.
diff -u -N apis/v1alpha1/zz_generated.deepcopy.go "$tmp/object/zz_generated.deepcopy.go" ||
  stale "apis/v1alpha1/zz_generated.deepcopy.go is not what controller-gen $version generates"
for generated in "$tmp"/crd/*.yaml; do
  name=$(basename "$generated")
  for committed in "manifests/crds/$name" "charts/sar-bridge/crds/$name"; do
    diff -u -N "$committed" "$generated" || stale "$committed is not what controller-gen $version generates"
  done
  grep -qx "  - $name" manifests/crds/kustomization.yaml ||
    stale "manifests/crds/kustomization.yaml does not list $name"
done
# A CRD whose type is gone is stale too.
for committed in manifests/crds/*.yaml charts/sar-bridge/crds/*.yaml; do
  name=$(basename "$committed")
  [ "$name" = kustomization.yaml ] || [ -e "$tmp/crd/$name" ] ||
    stale "$committed: controller-gen $version generates no such CRD"
done

if [ "$status" -ne 0 ]; then
  echo "generate-check: run 'make generate' and commit the result" >&2
fi
exit "$status"
