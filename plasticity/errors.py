"""The errors a user can fix: their messages say everything, so they are printed without a traceback.

``ConfigError`` (a bad config value, :mod:`plasticity.validate`; its problems collected by
:class:`Problems`), ``DataError`` (missing or corrupt
data, :mod:`plasticity.data.sources`), ``WeightsError`` (a weights file or hub weight that cannot
be used, :mod:`plasticity.models`) and ``ReportError`` all derive from ValueError or OSError.
"""

from __future__ import annotations

from typing import Any, Callable


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


class ConfigError(ValueError):
    """A config that cannot work; ``problems`` holds one message per problem, each with its fix."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(self.problems[0] if len(self.problems) == 1 else f"{len(self.problems)} problems:\n" +
                         "\n".join(f"  - {p}" for p in self.problems))


class Problems:
    """Collects problem messages instead of stopping at the first one."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, *messages: str) -> None:
        """Adds each message not already there."""
        for message in messages:
            if message not in self.items:
                self.items.append(message)

    def require(self, ok: bool, message: str) -> bool:
        """Adds ``message`` unless ``ok``; returns ``ok``."""
        if not ok:
            self.add(message)
        return ok

    def check(self, check: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Runs a check that raises on a problem (ValueError, FileNotFoundError or a WeightsError);
        its message becomes a problem. Returns whether it passed."""
        try:
            check(*args, **kwargs)
        except USER_ERRORS as err:
            self.add(*getattr(err, "problems", [str(err)]))
            return False
        return True

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)

    def names(self, *keys: str) -> bool:
        """Whether a problem already names one of ``keys`` or a key under it (messages start with the
        key): the checks between keys read only values of the right type."""
        return any(item.startswith((f"{key}=", f"{key} ", f"{key}.")) for key in keys for item in self.items)
