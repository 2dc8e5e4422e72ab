"""Suite-wide settings."""

import atexit
import os
import shutil
import tempfile

# A recorder in a launched process records the process's start (process_init). Tests
# run recorders inside pytest's long-lived process with launcher variables set by
# hand; their expected events leave that out. Tests of process_init turn it on.
os.environ["BADPUT_PROCESS_INIT"] = "0"

# A compacted job's read is kept (badput.runtime.state_cache) in a cache of this run's own,
# never the user's: every report of a compacted job after its first then loads it.
_STATE_CACHE = tempfile.mkdtemp(prefix="badput-state-")
os.environ["BADPUT_STATE_CACHE"] = _STATE_CACHE
atexit.register(shutil.rmtree, _STATE_CACHE, ignore_errors=True)
