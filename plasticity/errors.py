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


def did_you_mean(value: object, choices, n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The ``n`` choices closest to ``value`` (difflib's ratio >= ``cutoff``), best first: the one
    "did you mean" of every error about a name (config keys, datasets, models, tasks).

    Example:
        >>> did_you_mean("optimzer", ["optimizer", "model"])
        ['optimizer']
    """
    import difflib

    return difflib.get_close_matches(str(value), [str(c) for c in choices], n=n, cutoff=cutoff)
