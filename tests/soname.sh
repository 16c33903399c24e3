#!/bin/sh
# Link a program against libspclient as a user would, once against the
# build tree and once against a `make install` into a DESTDIR, and run it
# each time: the loader must find the file the library's SONAME names.
# Usage: tests/soname.sh BUILD_DIR (relative to the repository root).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
CC=${CC:-cc}
MAKE=${MAKE:-make}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL soname: $*"; exit 1; }

cat >"$tmp/prog.c" <<PROG
#include <stdio.h>
#include "spcoll.h"
/* No daemon listens on this socket: the library loads, runs and says so. */
int main(void) {
  spc_client *c;
  int rc = spc_connect("$tmp/none.sock", "soname", &c);
  if (rc != SPC_ECONNECTION) {
    fprintf(stderr, "spc_connect: %d, want SPC_ECONNECTION\n", rc);
    return 1;
  }
  printf("%s\n", spc_strerror(rc));
  return 0;
}
PROG

# link_run NAME LIBDIR INCDIR: build against LIBDIR, run with its path
# recorded (as an rpath) and nothing from the environment.
link_run() {
  "$CC" -I"$3" -o "$tmp/$1" "$tmp/prog.c" -L"$2" -lspclient \
    -Wl,-rpath,"$2" || fail "$1: cannot link against $2"
  need=$(readelf -d "$tmp/$1" | sed -n 's/.*(NEEDED).*\[\(libspclient[^]]*\)\].*/\1/p')
  [ "$need" = libspclient.so.1 ] || fail "$1 needs '$need', not libspclient.so.1"
  out=$(env -u LD_LIBRARY_PATH "$tmp/$1" 2>&1) || fail "$1 does not start: $out"
  case $(env -u LD_LIBRARY_PATH ldd "$tmp/$1") in
    *"libspclient.so.1 => $2/libspclient.so.1"*) ;;
    *) fail "$1 does not load $2/libspclient.so.1" ;;
  esac
  echo "PASS soname $1: $2/libspclient.so.1 ($out)"
}

# layout LIBDIR: libspclient.so.1 a file, libspclient.so a link to it.
layout() {
  [ -f "$1/libspclient.so.1" ] && [ ! -L "$1/libspclient.so.1" ] ||
    fail "$1/libspclient.so.1 is not a file"
  [ "$(readlink "$1/libspclient.so")" = libspclient.so.1 ] ||
    fail "$1/libspclient.so does not point at libspclient.so.1"
  soname=$(readelf -d "$1/libspclient.so.1" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
  [ "$soname" = libspclient.so.1 ] || fail "$1: SONAME is '$soname'"
}

# The library's public face: only spc_ functions (spcoll.h) are exported,
# no kernel, protobuf or internal (spc__) symbol.
exports=$(nm -D --defined-only "$ROOT/$BUILD/lib/libspclient.so.1" | awk '{print $3}')
[ -n "$exports" ] || fail "nm -D lists no symbol of libspclient.so.1"
others=$(printf '%s\n' "$exports" | grep -v '^spc_[a-z0-9]' || true)
[ -z "$others" ] || fail "libspclient.so.1 exports more than spc_ symbols: $(echo $others | head -c 400)"
echo "PASS exports: $(printf '%s\n' "$exports" | wc -l) symbols, every one spc_"

layout "$ROOT/$BUILD/lib"
link_run build-tree "$ROOT/$BUILD/lib" "$ROOT/client"
"$MAKE" --no-print-directory -s -C "$ROOT" BUILD="$BUILD" DESTDIR="$tmp/root" \
  PREFIX=/usr install >"$tmp/install.log" 2>&1 ||
  fail "make install: $(tail -n 20 "$tmp/install.log")"
layout "$tmp/root/usr/lib"
link_run installed "$tmp/root/usr/lib" "$tmp/root/usr/include"
