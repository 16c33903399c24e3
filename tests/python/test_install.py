"""The package installs: by `make install-python` (a copy, no network) and
by pip from the source tree; the installed copy imports and finds the
library. Each import runs in a fresh interpreter."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

PY = sys.executable


def _lib():
    lib = os.environ.get("SPCOLL_LIB") or os.path.join(
        REPO, os.environ.get("SPCOLL_BUILD", "build"), "lib", "libspclient.so")
    assert os.path.exists(lib), "no libspclient at %s (make all)" % lib
    return lib


def _import_from(site, extra_env=None):
    env = dict(os.environ, PYTHONPATH=site, PYTHONDONTWRITEBYTECODE="1")
    env.pop("SPCOLL_BUILD", None)
    env.update(extra_env or {})
    code = ("import spcoll, os; print(os.path.dirname(spcoll.__file__)); "
            "print(spcoll._lib.lib.spcoll_path)")
    p = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True,
                       cwd="/")
    return p.returncode, p.stdout.split("\n"), p.stderr


def test_make_install_python(tmp_path):
    dest = tmp_path / "root"
    p = subprocess.run(["make", "--no-print-directory", "-s", "-C", REPO, "install-python",
                        "DESTDIR=%s" % dest, "PREFIX=/usr/local", "PYTHON=%s" % PY],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    ver = "%d.%d" % sys.version_info[:2]
    site = dest / ("usr/local/lib/python%s/dist-packages" % ver)
    assert (site / "spcoll" / "__init__.py").exists(), sorted(str(x) for x in dest.rglob("*"))
    assert (site / "spcoll" / "_install.py").read_text().strip() == 'LIBDIR = "/usr/local/lib"'
    assert (site / "spcoll-0.1.0.dist-info" / "METADATA").exists()
    rc, out, err = _import_from(str(site), {"SPCOLL_LIB": _lib()})
    assert rc == 0, err
    assert out[0] == str(site / "spcoll") and out[1] == _lib()
    # without SPCOLL_LIB it looks where make install put the library, and
    # says so when it is not there
    rc, out, err = _import_from(str(site), {"SPCOLL_LIB": ""})
    if not os.path.exists("/usr/local/lib/libspclient.so.1"):
        assert rc != 0 and "/usr/local/lib/libspclient.so.1" in err, err


def test_pip_install_from_source(tmp_path):
    if subprocess.run([PY, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("pip is not installed for %s" % PY)
    src = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "client", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = tmp_path / "target"
    p = subprocess.run([PY, "-m", "pip", "install", "-q", "--no-build-isolation",
                        "--no-deps", "--no-index", "--target", str(target), str(src)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    rc, out, err = _import_from(str(target), {"SPCOLL_LIB": _lib()})
    assert rc == 0, err
    assert out[0] == str(target / "spcoll")


def test_bad_spcoll_lib_is_named(tmp_path):
    rc, out, err = _import_from(os.path.join(REPO, "client", "python"),
                                {"SPCOLL_LIB": str(tmp_path / "nope.so")})
    assert rc != 0 and "nope.so" in err and "SPCOLL_LIB" in err, err
