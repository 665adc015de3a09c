# -*- Python -*-
# lit configuration of Triad's GoogleTest unit tests: every executable named
# *Tests under the build's test/Unit directory.

import os

import lit.formats

config.name = "Triad-Unit"
config.suffixes = []
config.test_exec_root = os.path.join(config.triad_obj_root, "test", "Unit")
config.test_source_root = config.test_exec_root
config.test_format = lit.formats.GoogleTest(".", "Tests")
