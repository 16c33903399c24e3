#!/bin/sh
# Install the Debian packages spcoll needs that are missing (prometheus only
# for its promtool, which the stats test runs; nothing is started; torch,
# nlohmann-json (torch ships no copy of the header its FlightRecorder needs),
# Open MPI and gnuplot for the Python suites and bench baselines). Quiet and quick
# when everything is there; needs root (or sudo) when something is not.
set -eu
PKGS="build-essential pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler \
check libsystemd-dev libucx-dev libssl-dev ucx-utils valgrind python3 systemd prometheus clang libclang-rt-14-dev \
nlohmann-json3-dev python3-venv python3-dev python3-pip python3-torch python3-pytest openmpi-bin libopenmpi-dev gnuplot-nox iproute2"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
