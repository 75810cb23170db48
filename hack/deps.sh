#!/usr/bin/env bash
# Installs the Debian packages the tests need, only when they are missing:
#   memcached         the review cache's unit and end-to-end tests run a real one
#   systemd           systemd-analyze verify checks the edge node's unit file
#   qemu-user-static  the image test runs the arm64 image's entrypoint on an amd64 host
#                     (and the amd64 one on an arm64 host)
# With the argument "bench", only what make bench-http needs instead:
#   wrk               loads the bridge, the OPA server and the floor server
set -euo pipefail
missing=()
if [ "${1:-}" = bench ]; then
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
else
  command -v memcached >/dev/null 2>&1 || missing+=(memcached)
  # systemd-analyze: make chart-test verifies deploy/systemd/sar-bridge.service.
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
  case "$(uname -m)" in
    x86_64) command -v qemu-aarch64-static >/dev/null 2>&1 || missing+=(qemu-user-static) ;;
    aarch64) command -v qemu-x86_64-static >/dev/null 2>&1 || missing+=(qemu-user-static) ;;
  esac
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
