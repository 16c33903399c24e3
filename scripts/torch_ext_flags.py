"""Compile and link flags of the C++ c10d backend (mk/torch_ext.mk), from
the torch it is built against: its include paths and C++ ABI, Python's
headers, and, where torch has CUDA and the CUDA runtime's headers are
found whole (in the nvidia-* wheel torch depends on, else in the toolkit
torch's cpp_extension finds), -DSPC_TORCH_CUDA and libc10_cuda, so that
CUDA tensors go in place (client/torch/cuda.hpp); else neither, and CUDA
tensors take the Python backend's device path.
Usage: python torch_ext_flags.py FLAGS_FILE LIBS_FILE"""
import glob
import os
import sys
import sysconfig

import torch
from torch.utils import cpp_extension as c


# What torch's CUDA headers include: a directory must hold them all (the
# nvidia runtime wheel carries cuda_runtime.h but not always the crt/
# headers it includes, which come with the toolkit).
NEEDED = ("cuda_runtime_api.h", "cuda_runtime.h", "crt/host_config.h")


def complete(d):
    return all(os.path.exists(os.path.join(d, h)) for h in NEEDED)


def cuda_include():
    if not torch.version.cuda:
        return None
    site = os.path.dirname(os.path.dirname(torch.__file__))
    cands = sorted(os.path.dirname(h) for h in glob.glob(os.path.join(
        site, "nvidia", "*", "include", "cuda_runtime_api.h")))
    if c.CUDA_HOME:
        cands.append(os.path.join(c.CUDA_HOME, "include"))
    for d in cands:
        if complete(d):
            return d
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
