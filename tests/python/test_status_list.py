"""The Python package's status names against the one list
(kernels/status.h): same codes, same names as spcoll.h."""
import os
import re

from spcoll import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_status_names_match_the_list():
    with open(os.path.join(REPO, "kernels", "status.h")) as f:
        text = f.read()
    rows = re.findall(r"X\((\w+),\s*(\w+),\s*(\w+),\s*(\d+),", text)
    assert len(rows) >= 17, "no status rows found in kernels/status.h"
    want = {0: "SPC_OK"}
    want.update({-int(val): "SPC_" + pub for _, pub, _, val in rows})
    assert _lib.STATUS_NAMES == want
