"""The native wrappers accept a process group of backend "spcoll"; their
async forms (async_op=True) return handles; the library's ABI line is
checked against the package's ctypes layouts at import."""
import os
import subprocess
import sys

import pytest

import launch
import native_with_pg


@pytest.mark.parametrize("world", [2, 3])
def test_native_wrappers_take_a_process_group(daemon, workdir, world):
    d = os.path.join(workdir, "native-pg-%d" % world)
    res = launch.run_ranks(world, native_with_pg.run,
                           (daemon, os.path.join(d, "store")), d)
    for r, out in enumerate(res):
        assert "__error__" not in out, out["__error__"]
        bad = [k for k, v in out.items() if v is not True]
        assert not bad, "rank %d: %s" % (r, bad)


def test_abi_line_matches_the_library():
    from spcoll import _lib
    line = _lib.lib.spc_abi().decode()
    assert line == _lib.abi_line("0.1.0")
    assert "spc_tensor 88" in line and "SPC_MAX_DIMS 8" in line


def test_a_changed_layout_is_refused():
    from spcoll import _lib
    line = _lib.lib.spc_abi().decode().replace("spc_op 64", "spc_op 72")
    with pytest.raises(ImportError, match="another ABI"):
        _lib.check_abi(line, "libspclient.so")


def test_a_library_without_the_abi_query_is_refused():
    # libc has none of libspclient's symbols: the import names what lacks
    env = dict(os.environ, SPCOLL_LIB="libc.so.6")
    p = subprocess.run([sys.executable, "-c", "import spcoll"], env=env,
                       capture_output=True, text=True)
    assert p.returncode != 0
    assert "lacks spc_abi" in p.stderr, p.stderr
