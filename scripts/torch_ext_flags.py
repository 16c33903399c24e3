"""Compile and link flags of the C++ c10d backend (mk/torch_ext.mk), from
the torch it is built against: its include paths and C++ ABI, Python's
headers, and, where torch has CUDA and the CUDA runtime's headers are
found (the nvidia-* wheel torch depends on, else the toolkit torch's
cpp_extension finds), -DSPC_TORCH_CUDA and libc10_cuda, so that CUDA
tensors go in place (client/torch/cuda.hpp).
Usage: python torch_ext_flags.py FLAGS_FILE LIBS_FILE"""
import glob
import os
import sys
import sysconfig

import torch
from torch.utils import cpp_extension as c


def cuda_include():
    if not torch.version.cuda:
        return None
    site = os.path.dirname(os.path.dirname(torch.__file__))
    found = sorted(glob.glob(os.path.join(
        site, "nvidia", "*", "include", "cuda_runtime_api.h")))
    if found:
        return os.path.dirname(found[0])
    home = c.CUDA_HOME
    if home and os.path.exists(os.path.join(home, "include",
                                            "cuda_runtime_api.h")):
        return os.path.join(home, "include")
    return None


def main(flags_path, libs_path):
    flags = ["-isystem " + p for p in c.include_paths()]
    flags += ["-isystem " + sysconfig.get_paths()["include"],
              "-D_GLIBCXX_USE_CXX11_ABI=%d" % torch._C._GLIBCXX_USE_CXX11_ABI]
    libs = ["-L" + p for p in c.library_paths()]
    inc = cuda_include()
    if inc is not None:
        flags += ["-isystem " + inc, "-DSPC_TORCH_CUDA=1"]
        libs += ["-lc10_cuda"]
    with open(flags_path, "w") as f:
        f.write(" ".join(flags) + "\n")
    with open(libs_path, "w") as f:
        f.write(" ".join(libs) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
