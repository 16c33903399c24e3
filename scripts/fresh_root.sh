#!/bin/sh
# The README's test command on a fresh minimal Debian 12 root: debootstrap
# (bookworm, minbase) into DIR once, this tree's HEAD copied to DIR/src
# (its build/ kept between runs), `make` installed (a minimal root has
# none), then `make TARGETS` (default: check) in a chroot, output in
# DIR/check.log. Needs root, debootstrap and Debian's mirror.
#   CUDA=1  bind-mounts $CUDA_HOME (/usr/local/cuda) read-only; without
#           it `make check` installs the CUDA toolkit from PyPI (it is no
#           Debian package: scripts/cuda_toolkit.sh).
#   CA=1    copies this machine's CA bundle in, for a network whose TLS
#           proxy has a CA of its own (else pip sees no PyPI and the
#           torch 2.x suites SKIP as offline).
# Usage: sh scripts/fresh_root.sh DIR [TARGETS...]
set -eu
DIR=$(realpath -m "${1:?usage: fresh_root.sh DIR [TARGETS...]}")
shift
TARGETS=${*:-check}
REPO=$(cd "$(dirname "$0")/.." && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
R=$DIR/root
if [ ! -x "$R/bin/sh" ]; then
  mkdir -p "$DIR"
  debootstrap --variant=minbase bookworm "$R" http://deb.debian.org/debian \
    > "$DIR/debootstrap.log" 2>&1 || { echo "debootstrap failed: $DIR/debootstrap.log"; exit 1; }
fi
mkdir -p "$R/src"
find "$R/src" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
git -C "$REPO" archive HEAD | tar -x -C "$R/src"
cp /etc/resolv.conf "$R/etc/resolv.conf"
if [ "${CA:-0}" = 1 ]; then  # kept by update-ca-certificates when it runs
  mkdir -p "$R/usr/local/share/ca-certificates" "$R/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$R/usr/local/share/ca-certificates/host.crt"
  cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
fi
cleanup() {
  for m in usr/local/cuda dev sys proc; do
    mountpoint -q "$R/$m" && umount -lR "$R/$m"
  done
  # CUDA=1's mount point goes too: a fresh machine has no /usr/local/cuda
  [ -d "$R/usr/local/cuda" ] && rmdir "$R/usr/local/cuda" 2>/dev/null
  return 0
}
trap cleanup EXIT
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
if [ "${CUDA:-0}" = 1 ]; then
  mkdir -p "$R/usr/local/cuda"
  mount --bind -o ro "$(realpath "$CUDA_HOME")" "$R/usr/local/cuda"
fi
cat > "$R/run-check.sh" <<INNER
#!/bin/sh
export DEBIAN_FRONTEND=noninteractive HOME=/root
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
apt-get update -qq && apt-get install -y -qq --no-install-recommends make ca-certificates >/dev/null || exit 90
cd /src && make $TARGETS
INNER
chmod +x "$R/run-check.sh"
rc=0
# A new machine's environment, not this one's (CUDA_HOME, PIP_*, ...).
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot "$R" /run-check.sh > "$DIR/check.log" 2>&1 || rc=$?
grep -E "^SKIP|^FAIL|SKIPPED|passed|failed" "$DIR/check.log" | tail -n 40
echo "fresh root: make $TARGETS exited $rc (log: $DIR/check.log)"
exit $rc
