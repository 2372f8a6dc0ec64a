"""A third-party scheduler whose import fails as any import does when the daemon is out of file
descriptors (OSError EMFILE opening a source file) while the file `TXD_FDSHORT_FILE` names
exists: a moment's shortage, after which it imports. Otherwise it is fakepoll."""

import errno
import os

if os.path.exists(os.environ.get("TXD_FDSHORT_FILE", "/nonexistent")):
    raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), __file__)

from txd_fakepoll import create_scheduler

__all__ = ["create_scheduler"]
