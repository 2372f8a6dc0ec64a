"""A third-party scheduler whose module imports a package that may not be installed yet
(`txd_needsdep_lib`, under its distribution's extra `fast`): until a test makes that module
importable, the scheduler is unusable and says what to install. Otherwise it is fakepoll."""

import txd_needsdep_lib  # noqa: F401  (only its presence matters)
from txd_fakepoll import create_scheduler

__all__ = ["create_scheduler"]
