#!/usr/bin/env bash
# Installs the Debian packages the end-to-end tests need, only when they are missing.
set -euo pipefail
missing=()
command -v memcached >/dev/null 2>&1 || missing+=(memcached)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
