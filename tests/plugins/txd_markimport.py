"""A plugin scheduler whose module, when imported, creates the file named by
$TXD_MARKIMPORT_FILE: a test sees whether and when the daemon imported it. Otherwise it is
fakepoll."""

import os
from pathlib import Path

Path(os.environ["TXD_MARKIMPORT_FILE"]).touch()

from txd_fakepoll import create_scheduler  # noqa: E402

__all__ = ["create_scheduler"]
