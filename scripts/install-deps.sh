#!/bin/sh
# The one list of packages dtrain needs (Debian 12). Run as root or with sudo.
#   scripts/install-deps.sh          build, run and test (chromium: the report's
#                                    browser test, tests/e2e_compare.sh; iproute2:
#                                    ip and tc for scripts/cluster.sh)
#   scripts/install-deps.sh --bench  also PyTorch, the yardstick of bench/
set -e
PKGS="build-essential pkg-config libopenblas-dev zlib1g-dev dataset-fashion-mnist
      libopenmpi-dev openmpi-bin python3 python3-numpy chromium libdnnl-dev iproute2 fortunes"
[ "$1" = "--bench" ] && PKGS="$PKGS python3-torch time"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
