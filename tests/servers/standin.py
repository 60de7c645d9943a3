"""Fixture of test_zygote.py: says who runs it, waits for its stdin to close, exits with the code given."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import json
import os
import sys

print(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "cwd": os.getcwd(), "mark": os.environ.get("STANDIN_MARK"),
                  "mcp": "mcp" in sys.modules}), flush=True)
sys.stdin.read()
sys.exit(int(sys.argv[1]))
