"""NNX Rngs: named RNG streams, each a key plus a counter folded into it per call."""

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from .module import Module
from .variablelib import RngCount, RngKey

RngValue = int | jax.Array
_Sampler = Callable[..., jax.Array]


def _random_method(fn: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    def method(self: Any, *args: Any, **kwargs: Any) -> jax.Array:
        return fn(self(), *args, **kwargs)

    method.__name__ = fn.__name__
    method.__doc__ = f"``jax.random.{fn.__name__}`` with a fresh key from this stream."
    return method


class _RandomMethods:
    """``jax.random`` samplers drawing their key from ``self()``."""

    bernoulli: ClassVar[_Sampler] = _random_method(jax.random.bernoulli)
    bits: ClassVar[_Sampler] = _random_method(jax.random.bits)
    categorical: ClassVar[_Sampler] = _random_method(jax.random.categorical)
    choice: ClassVar[_Sampler] = _random_method(jax.random.choice)
    exponential: ClassVar[_Sampler] = _random_method(jax.random.exponential)
    gumbel: ClassVar[_Sampler] = _random_method(jax.random.gumbel)
    normal: ClassVar[_Sampler] = _random_method(jax.random.normal)
    permutation: ClassVar[_Sampler] = _random_method(jax.random.permutation)
    randint: ClassVar[_Sampler] = _random_method(jax.random.randint)
    truncated_normal: ClassVar[_Sampler] = _random_method(jax.random.truncated_normal)
    uniform: ClassVar[_Sampler] = _random_method(jax.random.uniform)

    def __call__(self) -> jax.Array:
        raise NotImplementedError


class RngStream(Module, _RandomMethods):
    """One stream: ``stream()`` returns ``fold_in(key, count)`` and increments ``count``."""

    tag: str
    key: RngKey
    count: RngCount

    def __init__(self, key: RngValue, *, tag: str) -> None:
        if isinstance(key, int):
            key = jax.random.key(key)
        elif isinstance(key, jax.Array) and key.dtype == jnp.uint32:
            key = jax.random.wrap_key_data(key)
        if not isinstance(key, jax.Array) or not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            raise ValueError(
                f"Invalid rng value: {key}, expected a jax.Array of jax.dtypes.prng_key sub-dtype"
            )
        self.tag = tag
        self.key = RngKey(key, tag=tag)
        self.count = RngCount(jnp.zeros(key.shape, dtype=jnp.uint32), tag=tag)

    def __call__(self) -> jax.Array:
        key = jax.random.fold_in(self.key.get_value(), self.count.get_value())
        self.count.set_value(self.count.get_value() + 1)
        return key

    def fork(self) -> "RngStream":
        """A new stream seeded by the next key of this one."""
        return type(self)(self(), tag=self.tag)

    def split(self, k: int | tuple[int, ...]) -> "RngStream":
        """A new stream whose key is the next key split into shape ``k``."""
        return type(self)(jax.random.split(self(), k), tag=self.tag)


class Rngs(Module, _RandomMethods):
    """Named RNG streams: ``Rngs(0, dropout=1)`` has streams ``default`` and ``dropout``.

    ``rngs.params()``, ``rngs['params']()`` give a fresh key of stream ``params``, falling
    back to ``default`` when there is no such stream; ``rngs()`` uses ``default``.
    ``rngs.normal(shape)`` etc. sample with a fresh ``default`` key.
    """

    def __init__(
        self,
        default: RngValue | RngStream | Mapping[str, RngValue | RngStream] | None = None,
        **rngs: RngValue | RngStream,
    ) -> None:
        if default is not None:
            if isinstance(default, Mapping):
                rngs = {**default, **rngs}
            else:
                rngs["default"] = default
        for tag, key in rngs.items():
            if isinstance(key, RngStream):
                key = key.key.get_value()
            setattr(self, tag, RngStream(key, tag=tag))

    def _get_stream(self, name: str, error: type[Exception]) -> RngStream:
        streams = vars(self)
        if name in streams:
            return streams[name]
        if "default" in streams:
            return streams["default"]
        raise error(f"No RngStream named '{name}' found in Rngs.")

    def __getitem__(self, name: str) -> RngStream:
        return self._get_stream(name, KeyError)

    def __getattr__(self, name: str) -> RngStream:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._get_stream(name, AttributeError)

    def __call__(self) -> jax.Array:
        return self._get_stream("default", AttributeError)()

    def __iter__(self) -> Iterator[str]:
        return (name for name, value in vars(self).items() if isinstance(value, RngStream))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return name in vars(self)

    def items(self) -> Iterator[tuple[str, RngStream]]:
        """``(name, stream)`` pairs."""
        return ((name, vars(self)[name]) for name in self)

    def fork(self) -> "Rngs":
        """New Rngs whose streams are seeded by the next key of each stream."""
        return Rngs(**{name: stream.fork() for name, stream in self.items()})

    def split(self, k: int | tuple[int, ...]) -> "Rngs":
        """New Rngs whose streams' keys are the next key of each stream split into shape ``k``."""
        return Rngs(**{name: stream.split(k) for name, stream in self.items()})
