"""``adapters.config``: process-wide flags under ``flax.config``'s names.

``config`` is the flag store (a ``Config``); the module itself forwards to it, so both
``from adapters import config`` and ``import adapters.config as config`` give an object
with ``config.flax_profile``, ``config.update(name, value)`` and
``config.temp_flip_flag(name, value)``. Every flag's process default can be set by the
environment variable of its upper-cased name (``FLAX_PROFILE=0``), read once at import.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Generic, NoReturn, TypeVar

_T = TypeVar("_T")

_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")


def static_bool_env(varname: str, default: bool) -> bool:
    """The boolean value of environment variable ``varname`` (``default`` when unset)."""
    val = os.getenv(varname, str(default)).lower()
    if val in _TRUE:
        return True
    if val in _FALSE:
        return False
    raise ValueError(f"invalid truth value {val!r} for environment {varname!r}")


def static_int_env(varname: str, default: int | None) -> int | None:
    """The integer value of environment variable ``varname`` (``default`` when unset)."""
    val = os.getenv(varname)
    if val is None:
        return default
    try:
        return int(val)
    except ValueError:
        raise ValueError(f"invalid integer value {val!r} for environment {varname!r}") from None


class Config:
    """The flag values; read a flag as an attribute, change it with ``update``."""

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {})

    def _add_option(self, name: str, default: Any) -> None:
        if name in self._values:
            raise RuntimeError(f"Config option {name} already defined")
        self._values[name] = default

    def _read(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise LookupError(f"Unrecognized config option: {name}") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._read(name)
        except LookupError as e:
            raise AttributeError(str(e)) from None

    def update(self, name_or_holder: "str | FlagHolder[Any]", value: Any, /) -> None:
        """Set flag ``name_or_holder`` (a name or a ``FlagHolder``) to ``value``."""
        name = name_or_holder.name if isinstance(name_or_holder, FlagHolder) else name_or_holder
        if name not in self._values:
            raise LookupError(f"Unrecognized config option: {name}")
        self._values[name] = value

    @contextmanager
    def temp_flip_flag(self, var_name: str, var_value: bool) -> Iterator[None]:
        """Set ``flax_<var_name>`` to ``var_value`` for the ``with`` block, then restore it."""
        name = f"flax_{var_name}"
        old = self._read(name)
        try:
            self.update(name, var_value)
            yield
        finally:
            self.update(name, old)

    def __repr__(self) -> str:
        items = ", ".join(f"\n  {k}={v!r}" for k, v in self._values.items())
        return f"Config({items}\n)"


config: Config = Config()
"""The process-wide flags."""


class FlagHolder(Generic[_T]):
    """A handle on one flag: ``holder.value`` is its current value."""

    def __init__(self, name: str, help: str):
        self.name = name
        self.__name__: str = name[5:] if name.startswith("flax_") else name
        self.__doc__ = f"Flag holder for `{name}`.\n\n{help}"

    def __bool__(self) -> NoReturn:
        raise TypeError(
            f"bool() not supported for instances of type '{type(self).__name__}' "
            f"(did you mean to use '{type(self).__name__}.value' instead?)"
        )

    @property
    def value(self) -> _T:
        """The flag's current value."""
        return config._read(self.name)


def bool_flag(name: str, *, default: bool, help: str) -> FlagHolder[bool]:
    """Define boolean flag ``name`` (env var ``NAME`` overrides ``default``)."""
    name = name.lower()
    config._add_option(name, static_bool_env(name.upper(), default))
    return FlagHolder[bool](name, help)


def int_flag(name: str, *, default: int | None, help: str) -> FlagHolder[int]:
    """Define integer flag ``name`` (env var ``NAME`` overrides ``default``)."""
    name = name.lower()
    config._add_option(name, static_int_env(name.upper(), default))
    return FlagHolder[int](name, help)


# The flags (holders not bound: on this module a flag name reads its value).
bool_flag(name="flax_filter_frames", default=True, help="Hide library stack frames in tracebacks.")
bool_flag(
    name="flax_profile",
    default=True,
    help="Run Module methods under jax.named_scope (names in profiles).",
)
bool_flag(name="flax_use_orbax_checkpointing", default=True, help="Save checkpoints with Orbax.")
bool_flag(
    name="flax_preserve_adopted_names",
    default=False,
    help="Keep the names of modules adopted from outside instead of renaming them.",
)
bool_flag(
    name="flax_return_frozendict",
    default=False,
    help="Return FrozenDicts from init and apply.",
)
bool_flag(
    name="flax_fix_rng_separator",
    default=False,
    help="Separate the parts of the static data folded into PRNG keys.",
)
bool_flag(
    name="flax_use_flaxlib", default=False, help="Use flaxlib's C++ acceleration (unused here)."
)
bool_flag(name="flax_array_ref", default=False, help="Use array refs.")
bool_flag(name="flax_pytree_module", default=True, help="Whether Modules are pytrees by default.")
int_flag(
    name="flax_max_repr_depth",
    default=None,
    help="Maximum depth of nested reprs (None: no limit).",
)
bool_flag(
    name="flax_always_shard_variable",
    default=True,
    help="Shard variables that carry sharding annotations automatically (NNX).",
)
bool_flag(name="flax_hijax_variable", default=False, help="HiJAX support for variables (NNX).")
bool_flag(name="nnx_graph_mode", default=True, help="NNX APIs default to graph mode (NNX).")
bool_flag(name="nnx_graph_updates", default=True, help="Graph mode uses dynamic traversal (NNX).")


def update(name_or_holder: "str | FlagHolder[Any]", value: Any, /) -> None:
    """``config.update`` (the module forwards to the flag store)."""
    config.update(name_or_holder, value)


def temp_flip_flag(var_name: str, var_value: bool) -> Any:
    """``config.temp_flip_flag`` (the module forwards to the flag store)."""
    return config.temp_flip_flag(var_name, var_value)


def _read(name: str) -> Any:
    """``config._read`` (the module forwards to the flag store): a flag's current value."""
    return config._read(name)


def __getattr__(name: str) -> Any:
    # ``adapters.config.flax_xxx`` reads the flag, as ``flax.config.flax_xxx`` does.
    if name.startswith("flax_") or name.startswith("nnx_"):
        try:
            return config._read(name)
        except LookupError:
            pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
