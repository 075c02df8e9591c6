"""The errors a user can fix: their messages say everything, so they are printed without a traceback.

``ConfigError`` (a bad config value, :mod:`plasticity.validate`), ``DataError`` (missing or corrupt
data, :mod:`plasticity.data.sources`), ``WeightsError`` (a weights file or hub weight that cannot
be used, :mod:`plasticity.models`) and ``ReportError`` all derive from ValueError or OSError.
"""

from __future__ import annotations


class WeightsError(ValueError):
    """Pretrained weights that cannot be found, read or fetched, or that belong to another architecture."""


USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, NotADirectoryError, WeightsError)
"""Exceptions whose message names the value and the fix (no traceback needed)."""
