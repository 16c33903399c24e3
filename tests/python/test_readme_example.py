"""The README's PyTorch example (Ulysses attention) runs as written on 2
processes and agrees with its own single-process computation."""
import os
import re
import subprocess
import sys

from conftest import REPO


def test_readme_ulysses_example(daemon, tmp_path):
    text = open(os.path.join(REPO, "README.md")).read()
    section = text[text.index("## PyTorch"):]
    section = section[:section.index("\n## ", 1)]
    code = next(c for c in re.findall(r"```python\n(.*?)```", section, re.S)
                if "ulysses" in c)
    script = tmp_path / "ulysses.py"
    script.write_text(code)
    env = dict(os.environ, SPCOLL_SOCKET=daemon, PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.path.join(REPO, "client", "python"), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "2"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append((p.wait(120), p.stdout.read()))
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(("hung", p.stdout.read()))
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and "matches the single-process run" in out, \
            "rank %d exited %s:\n%s" % (r, rc, out)
