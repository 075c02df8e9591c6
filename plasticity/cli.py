"""Hydra's composition errors in one line, a mistyped key with the closest existing key.

Hydra answers ``optimzer.lr=1`` with "To append to your config use +optimzer.lr=1", which would add
a key nothing reads, and ``trainer.max_steps=abc`` with the same advice although the task sets
``trainer.max_steps`` itself. ``launch.py`` lets Hydra's exceptions reach :func:`reporting_errors`,
and the sweeper hands it a job that does not compose: when Hydra could not place a key,
:func:`explain` composes the config of the command's groups (only then) and names the closest
existing key or the key that really controls it; a value OmegaConf refuses (a launcher's typed option) is
named with the type it must have. Everything else is left to Hydra's own message and
to :mod:`plasticity.validate`.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Iterator

__all__ = ["explain", "reporting_errors"]

# Hydra's flags whose next argument is their value, not an override.
_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--experimental-rerun")


def overrides_of(argv: list[str]) -> list[str]:
    """The overrides of a command line: what is left once Hydra's flags (and their values) are parsed out."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for flag in _FLAGS_WITH_VALUE:
        parser.add_argument(flag)
    return [arg for arg in parser.parse_known_args(argv)[1] if not arg.startswith("-")]


def first_values(overrides: list[str]) -> list[str]:
    """Each sweep override (``a=1,2``) replaced by its first value; Hydra's own keys dropped."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    for text, override in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if override.key_or_group.startswith("hydra"):  # the launcher's keys: composed only under their group
            continue
        if override.is_sweep_override() and override.is_discrete_sweep():
            text = f"{override.get_key_element()}={next(iter(override.sweep_string_iterator()))}"
        out.append(text)
    return out


def suggestion(key: str, overrides: list[str]) -> str:
    """The fix for a key Hydra could not place."""
    import inspect

    from plasticity.validate import Trainer, did_you_mean, flat_keys, optimizer_class

    section, _, leaf = key.partition(".")
    if section == "trainer" and leaf in Trainer.OWNED:
        return f"{key} is set by the task from its own keys, so it cannot be set here. Fix: {Trainer.OWNED[leaf]}."
    # Only the group choices (model=..., task=...): the keys of the config the user chose, without the bad key.
    cfg = _compose([o for o in first_values(overrides) if "." not in o.split("=", 1)[0].lstrip("+~")])
    cls = optimizer_class(cfg.optimizer.get("_target_"))  # its arguments follow the parameters
    if section == "optimizer" and cls is not None and leaf in list(inspect.signature(cls).parameters)[1:]:
        return (f"{key} is an argument of {cfg.optimizer._target_} that its config file leaves at torch's default. "
                f"Fix: +{key}=<value> (the + adds it).")
    if near := did_you_mean(key, [k for k in flat_keys(cfg) if not k.startswith("hydra")]):
        return f"{key} is not a config key; the closest is {near[0]}. Fix: {near[0]}=<value>."
    return (f"{key} is not a config key. Fix: check the spelling (python launch.py --cfg job lists every key), "
            f"or +{key}=<value> to add a new one on purpose.")


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import plasticity

    # Inside the launch (the sweeper, or after Hydra's error) Hydra is initialised already.
    with (contextlib.nullcontext() if GlobalHydra.instance().is_initialized() else
          initialize_config_dir(config_dir=str(plasticity.CONF_DIR), version_base="1.3")):
        return compose("config", overrides=overrides)


def explain(err: Exception, overrides: list[str]) -> str:
    """One line for an error composing ``overrides``: the fix for a key Hydra could not place, else
    Hydra's message (and its OmegaConf cause)."""
    match = re.search(r"Could not override '([^']+)'", str(err))
    if not match:
        cause = err.__cause__  # a value OmegaConf refused (a launcher's typed option): the cause names it
        return omegaconf_line(cause) if getattr(cause, "full_key", None) else str(err)
    bad = next((o for o in overrides if o.lstrip("+~").startswith(match.group(1) + "=")), match.group(1))
    return f"{bad}: {suggestion(match.group(1), overrides)}"


@contextlib.contextmanager
def reporting_errors(argv: list[str]) -> Iterator[None]:
    """Around Hydra's entry point (run with ``HYDRA_FULL_ERROR=1``): a Hydra error is printed in one
    line with its fix, and the process exits 1.

    Raises:
        SystemExit: code 1 after a Hydra error.
    """
    from hydra.errors import HydraException

    try:
        yield
    except HydraException as err:
        print(f"error: {explain(err, overrides_of(argv))}", file=sys.stderr)
        raise SystemExit(1) from None


def omegaconf_line(cause) -> str:
    """OmegaConf's refusal of a value (``hydra.launcher.timeout_min=abc``) in one line, with the type its
    structured config declares."""
    import dataclasses

    want = next((f.type for f in dataclasses.fields(cause.object_type) if f.name == cause.key), None) \
        if dataclasses.is_dataclass(cause.object_type) else None
    want = getattr(want, "__name__", want)  # int -> "int"; Optional[int] stays as written
    fix = f"{cause.full_key}=<{want}>" if want else f"a value of the type {cause.full_key} holds"
    return f"{cause.full_key}={cause.value!r}: {str(cause.msg).splitlines()[0]}. Fix: {fix}."
