#!/usr/bin/env bash
# Prints the version a build is stamped with: `git describe` against the release tags
# (v*), e.g. v0.1.0, v0.1.0-4-g3672efa or v0.1.0-4-g3672efa-dirty. Before the first
# release tag, or without git (a source tarball), it is the VERSION file's release with a
# "-dev" suffix and the short commit when there is one: v0.1.0-dev-g3672efa.
set -euo pipefail
cd "$(dirname "$0")/.."
release=$(cat VERSION)
if described=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
  echo "$described"
elif commit=$(git rev-parse --short=7 HEAD 2>/dev/null); then
  dirty=""
  git diff --quiet HEAD 2>/dev/null || dirty="-dirty"
  echo "$release-dev-g$commit$dirty"
else
  echo "$release-dev"
fi
