"""``python -m fastdispatch.bench``: the same as ``python -m fastdispatch bench``."""

import sys

from . import main

sys.exit(main(prog="fastdispatch.bench"))
