"""``adapters.config``: Flax's flags, their defaults, update and temporary flips."""

import os
import subprocess
import sys

import flax
import pytest

import adapters
from adapters import config

FLAGS = [
    "flax_filter_frames",
    "flax_profile",
    "flax_use_orbax_checkpointing",
    "flax_preserve_adopted_names",
    "flax_return_frozendict",
    "flax_fix_rng_separator",
    "flax_use_flaxlib",
    "flax_array_ref",
    "flax_pytree_module",
    "flax_max_repr_depth",
]


@pytest.mark.parametrize("name", FLAGS)
def test_defaults_match_flax(name: str) -> None:
    assert getattr(config, name) == getattr(flax.config, name)
    assert getattr(config.config, name) == getattr(flax.config, name)


def test_update_and_temp_flip() -> None:
    assert config.flax_return_frozendict is False
    config.update("flax_return_frozendict", True)
    try:
        assert config.flax_return_frozendict is True
        assert adapters.config.config.flax_return_frozendict is True
    finally:
        config.update("flax_return_frozendict", False)
    with config.temp_flip_flag("return_frozendict", True):
        assert config.flax_return_frozendict is True
    assert config.flax_return_frozendict is False


def test_unknown_flag() -> None:
    with pytest.raises(LookupError, match="Unrecognized config option: flax_nope"):
        config.update("flax_nope", True)
    with pytest.raises(AttributeError, match="flax_nope"):
        _ = config.flax_nope
    with pytest.raises(AttributeError, match="Unrecognized config option: flax_nope"):
        _ = config.config.flax_nope


def test_flag_holder_and_definition() -> None:
    holder = config.int_flag("flax_test_only_int", default=7, help="test")
    assert holder.value == 7 and holder.__name__ == "test_only_int"
    config.update(holder, 8)
    assert config.flax_test_only_int == 8
    with pytest.raises(TypeError, match="bool\\(\\) not supported"):
        bool(holder)
    with pytest.raises(RuntimeError, match="Config option flax_test_only_int already defined"):
        config.int_flag("flax_test_only_int", default=1, help="again")
    assert "flax_test_only_int=8" in repr(config.config)


def test_environment_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_BOOL", "Off")
    assert config.static_bool_env("SOME_BOOL", True) is False
    monkeypatch.setenv("SOME_BOOL", "maybe")
    with pytest.raises(ValueError, match="invalid truth value 'maybe' for environment 'SOME_BOOL'"):
        config.static_bool_env("SOME_BOOL", True)
    monkeypatch.setenv("SOME_INT", "12")
    assert config.static_int_env("SOME_INT", None) == 12
    monkeypatch.setenv("SOME_INT", "x")
    with pytest.raises(ValueError, match="invalid integer value 'x' for environment 'SOME_INT'"):
        config.static_int_env("SOME_INT", None)
    assert config.static_int_env("UNSET_INT_XYZ", 3) == 3


def test_environment_sets_the_process_default() -> None:
    code = "from adapters import config; print(config.flax_profile, config.flax_max_repr_depth)"
    env = {**os.environ, "FLAX_PROFILE": "false", "FLAX_MAX_REPR_DEPTH": "2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "2"], out.stderr
