"""Frameworks share a group: ranks 0 and 1 are C programs (libspclient),
ranks 2 and 3 PyTorch processes; all join one named group and run
all_to_all, all_gather and all_reduce together. Each side checks every
element against the formulas in cpeer.c."""
import os
import subprocess

import torch

import spcoll
import launch
from conftest import CPEER

WORLD = 4


def torch_rank(local, _n, socket, name):
    r = 2 + local                                  # global rank
    w = WORLD
    client = spcoll.connect(socket, framework="torch")
    g = client.join(name, w, r)
    errors = []

    def same(what, got, want):
        if not torch.equal(got, want):
            errors.append("rank %d %s: got %s, want %s" % (r, what, got.tolist(), want.tolist()))

    x = torch.arange(2 * w * 3, dtype=torch.float32).reshape(2 * w, 3) + 1000 * r
    y = spcoll.all_to_all(x, g, 0, 1)
    want = torch.tensor([[1000.0 * j + 3 * (2 * r + a) + k for j in range(w) for k in range(3)]
                         for a in range(2)])
    same("all_to_all", y, want)
    x = torch.arange((r + 1) * 4, dtype=torch.float32).reshape(r + 1, 4) + 1000 * r
    y = spcoll.ops.all_gather(x, g, 0, [j + 1 for j in range(w)])
    want = torch.cat([torch.arange((j + 1) * 4, dtype=torch.float32).reshape(j + 1, 4)
                      + 1000 * j for j in range(w)])
    same("all_gather", y, want)
    z = torch.arange(5, dtype=torch.float32) + r
    same("all_reduce", spcoll.ops.all_reduce(z, g),
         torch.arange(5, dtype=torch.float32) * w + w * (w - 1) // 2)
    g.leave()
    return errors


def test_c_and_torch_ranks_share_a_group(daemon, workdir):
    assert os.access(CPEER, os.X_OK), \
        "no C peer at %s: build it with make check-python (or set SPCOLL_CPEER)" % CPEER
    name = "mixed-%d" % os.getpid()
    peers = [subprocess.Popen([CPEER, daemon, name, str(WORLD), str(r)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in (0, 1)]
    try:
        results = launch.run_ranks(2, torch_rank, (daemon, name),
                                   os.path.join(workdir, "mixed"), guard=60)
    finally:
        outs = []
        for p in peers:
            try:
                out, _ = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            outs.append((p.returncode, out.decode()))
    problems = []
    for res in results:
        problems += [res["__error__"]] if isinstance(res, dict) else res
    for r, (rc, out) in enumerate(outs):
        if rc != 0:
            problems.append("C rank %d exited %s: %s" % (r, rc, out))
        elif "ok" not in out:
            problems.append("C rank %d said: %s" % (r, out))
    assert not problems, "\n".join(problems)
