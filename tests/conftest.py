"""Suite-wide settings."""

import os

# A recorder in a launched process records the process's start (process_init). Tests
# run recorders inside pytest's long-lived process with launcher variables set by
# hand; their expected events leave that out. Tests of process_init turn it on.
os.environ["BADPUT_PROCESS_INIT"] = "0"
