#!/bin/sh
# Helm post-renderer: kustomize the chart's rendered manifests with the sar-bridge sidecar.
set -eu
cd "$(dirname "$0")"
cat > all.yaml
exec kubectl kustomize .
