"""Settings for the whole suite.

The test projects define servers, hooks and allow rules, so every folder is
trusted (`TOOLKERNEL_TRUST_ALL`, see toolkernel/_trust.py), in this process
and in the kernels the tests start. The trust tests remove the variable
themselves. Trust records go to a private folder, never the machine's own.
"""

import os
import tempfile

os.environ["TOOLKERNEL_TRUST_ALL"] = "1"
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="toolkernel-test-state-")
