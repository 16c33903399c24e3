"""How many GPUs torch sees, asked in a child process: torch's own
device count marks this process so that forked children cannot use CUDA
(torch "poisons" fork), and the rank processes of the suites are forked."""
import subprocess
import sys

_seen = {}


def gpus():
    """The number of CUDA devices torch sees (0 without), or a string
    saying why the probe failed."""
    if "n" not in _seen:
        probe = ("import torch; print(torch.cuda.device_count() "
                 "if torch.cuda.is_available() else 0)")
        try:
            out = subprocess.run([sys.executable, "-c", probe], check=True,
                                 capture_output=True, text=True, timeout=300)
            _seen["n"] = int(out.stdout.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError) as e:
            _seen["n"] = "torch's CUDA probe failed: %s" % e
    return _seen["n"]
