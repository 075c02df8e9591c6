"""Command-line overrides checked before Hydra runs: a mistyped key gets the closest existing key.

Hydra answers ``optimzer.lr=1`` with "To append to your config use +optimzer.lr=1", which
would add a key nothing reads, and ``trainer.max_steps=abc`` with the same advice although the
task sets ``trainer.max_steps`` itself. :func:`precheck` composes the config once with the
command's overrides (the first value of each sweep) and, when Hydra cannot place a key, stops
with the closest existing key or the key that really controls it. Everything else is left to
Hydra and to :mod:`plasticity.validate`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["precheck"]

# Hydra's flags whose next argument is their value, not an override; and those that only print.
_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--experimental-rerun")
_INFO_FLAGS = ("-h", "--help", "--hydra-help", "--version", "-i", "--info", "-sc", "--shell-completion")


def overrides_of(argv: list[str]) -> list[str] | None:
    """The overrides of a command line; None for help and info commands (nothing to check)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _INFO_FLAGS or arg.startswith(("--info=", "--shell-completion=")):
            return None
        elif arg in _FLAGS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            out.append(arg)
    return out


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


def suggestion(key: str, config_dir: Path, overrides: list[str]) -> str:
    """The fix for a key Hydra could not place."""
    from plasticity.validate import TASK_OWNED_TRAINER, closest, flat_keys

    section, _, leaf = key.partition(".")
    if section == "trainer" and leaf in TASK_OWNED_TRAINER:
        return f"{key} is set by the task from its own keys, so it cannot be set here. Fix: {TASK_OWNED_TRAINER[leaf]}."
    # Only the group choices (model=..., task=...): the keys of the config the user chose, without the bad key.
    groups = [o for o in overrides if "." not in o.split("=", 1)[0].lstrip("+~")]
    cfg = _compose(config_dir, groups)
    if section == "optimizer" and leaf in optimizer_arguments(cfg.optimizer.get("_target_")):
        return (f"{key} is an argument of {cfg.optimizer._target_} that its config file leaves at torch's default. "
                f"Fix: +{key}=<value> (the + adds it).")
    keys = flat_keys(cfg)
    near = closest(key, [k for k in keys if not k.startswith("hydra")])
    if near:
        return f"{key} is not a config key; the closest is {near}. Fix: {near}=<value>."
    return (f"{key} is not a config key. Fix: check the spelling (python launch.py --cfg job lists every key), "
            f"or +{key}=<value> to add a new one on purpose.")


def optimizer_arguments(target: str | None) -> list[str]:
    """The arguments of the optimizer class ``target`` names (none when it is not one)."""
    import inspect

    from plasticity.validate import optimizer_class

    cls = optimizer_class(target)
    return [] if cls is None else [name for name in inspect.signature(cls).parameters if name != "params"]


def _compose(config_dir: Path, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose("config", overrides=overrides)


def precheck(argv: list[str], config_dir: str | Path) -> None:
    """Exits with a clear message when an override names a key that does not exist.

    Args:
        argv: The command line after the program name.
        config_dir: The ``conf/`` folder.

    Raises:
        SystemExit: code 1, after printing the problem and its fix.
    """
    from hydra.errors import HydraException

    overrides = overrides_of(argv)
    if not overrides:
        return
    try:
        overrides = first_values(overrides)
        _compose(Path(config_dir), overrides)
    except HydraException as err:
        match = re.search(r"Could not override '([^']+)'", str(err))
        if not match:
            return  # Hydra's own message (unknown group option, parse error) lists the choices
        bad = next((o for o in overrides if o.lstrip("+~").startswith(match.group(1) + "=")), match.group(1))
        print(f"error: {bad}: {suggestion(match.group(1), Path(config_dir), overrides)}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception:
        return  # anything else: Hydra reports it with its own words
