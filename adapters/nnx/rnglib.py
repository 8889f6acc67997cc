"""NNX randomness (``flax.nnx.rnglib``): named RNG streams and the helpers that split,
fork, broadcast and reseed the streams held anywhere in a graph.

A stream (``RngStream``) holds a key (``RngKey``) and a counter (``RngCount``), both
Variables whose ``tag`` metadata is the stream's name. Calling it returns
``jax.random.fold_in(key, count)`` and adds one to the counter, so ``Rngs(0)`` yields
exactly the keys Flax's does and a layer built from the same seed gets the same
parameters. ``Rngs`` is a set of named streams with a ``default`` fallback.
``RngState``/``RngKey``/``RngCount`` are defined in ``variablelib`` (``pytreelib``, below
this module, groups them in its size summaries) and re-exported here under Flax's path.

Graph-wide helpers (``split_rngs``, ``fork_rngs``, ``with_rngs``, ``reseed``) find the
streams with ``graphlib``'s traversals and select them with NNX filters (a string filter
is a stream's tag). With ``graph=True, graph_updates=True`` (Flax's defaults) they change
the streams in place and return a ``SplitBackups`` that ``restore_rngs`` (or leaving its
``with`` block) undoes; otherwise they return a copy with new streams.
"""

import functools
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar, cast, overload

import jax
import jax.numpy as jnp
from jax import random

from adapters.typing import MISSING, Missing

from . import filterlib, graphlib
from .pytreelib import Pytree
from .variablelib import RngCount as RngCount
from .variablelib import RngKey as RngKey
from .variablelib import RngState as RngState

F = TypeVar("F", bound=Callable[..., Any])
A = TypeVar("A")
RngValue = int | jax.Array
SplitShape = int | tuple[int, ...]
Filter = Any

NotKey = filterlib.All(RngState, filterlib.Not(RngKey))

# ----------------------------------------------------------------------------- samplers

_Sampler = Callable[..., jax.Array]
_KeylessInit = Callable[..., jax.Array]
_InitMaker = Callable[..., _KeylessInit]


def _sampler(fn: Callable[..., jax.Array]) -> _Sampler:
    """``fn(key, *args)`` as a method drawing ``key`` from ``self()``."""

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> jax.Array:
        return fn(self(), *args, **kwargs)

    return method


def _keyless(make: Callable[..., Callable[..., jax.Array]]) -> _InitMaker:
    """An initializer constructor as a method returning the initializer without its key
    argument: ``rngs.lecun_normal()((2, 3))`` draws the key when the initializer is called."""

    @functools.wraps(make)
    def method(self: Any, *args: Any, **kwargs: Any) -> _KeylessInit:
        init = make(*args, **kwargs)

        def keyless(*init_args: Any, **init_kwargs: Any) -> jax.Array:
            return init(self(), *init_args, **init_kwargs)

        return keyless

    return method


_inits = jax.nn.initializers


class _Random:
    """``jax.random``'s samplers and ``jax.nn.initializers``' random initializers as
    methods keyed by ``self()`` (the names that clash with samplers are the samplers)."""

    def __call__(self) -> jax.Array:
        raise NotImplementedError

    ball: ClassVar[_Sampler] = _sampler(random.ball)
    bernoulli: ClassVar[_Sampler] = _sampler(random.bernoulli)
    beta: ClassVar[_Sampler] = _sampler(random.beta)
    binomial: ClassVar[_Sampler] = _sampler(random.binomial)
    bits: ClassVar[_Sampler] = _sampler(random.bits)
    categorical: ClassVar[_Sampler] = _sampler(random.categorical)
    cauchy: ClassVar[_Sampler] = _sampler(random.cauchy)
    chisquare: ClassVar[_Sampler] = _sampler(random.chisquare)
    choice: ClassVar[_Sampler] = _sampler(random.choice)
    dirichlet: ClassVar[_Sampler] = _sampler(random.dirichlet)
    double_sided_maxwell: ClassVar[_Sampler] = _sampler(random.double_sided_maxwell)
    exponential: ClassVar[_Sampler] = _sampler(random.exponential)
    f: ClassVar[_Sampler] = _sampler(random.f)
    gamma: ClassVar[_Sampler] = _sampler(random.gamma)
    generalized_normal: ClassVar[_Sampler] = _sampler(random.generalized_normal)
    geometric: ClassVar[_Sampler] = _sampler(random.geometric)
    gumbel: ClassVar[_Sampler] = _sampler(random.gumbel)
    laplace: ClassVar[_Sampler] = _sampler(random.laplace)
    loggamma: ClassVar[_Sampler] = _sampler(random.loggamma)
    logistic: ClassVar[_Sampler] = _sampler(random.logistic)
    lognormal: ClassVar[_Sampler] = _sampler(random.lognormal)
    maxwell: ClassVar[_Sampler] = _sampler(random.maxwell)
    multinomial: ClassVar[_Sampler] = _sampler(random.multinomial)
    multivariate_normal: ClassVar[_Sampler] = _sampler(random.multivariate_normal)
    normal: ClassVar[_Sampler] = _sampler(random.normal)
    orthogonal: ClassVar[_Sampler] = _sampler(random.orthogonal)
    pareto: ClassVar[_Sampler] = _sampler(random.pareto)
    permutation: ClassVar[_Sampler] = _sampler(random.permutation)
    poisson: ClassVar[_Sampler] = _sampler(random.poisson)
    rademacher: ClassVar[_Sampler] = _sampler(random.rademacher)
    randint: ClassVar[_Sampler] = _sampler(random.randint)
    rayleigh: ClassVar[_Sampler] = _sampler(random.rayleigh)
    t: ClassVar[_Sampler] = _sampler(random.t)
    triangular: ClassVar[_Sampler] = _sampler(random.triangular)
    truncated_normal: ClassVar[_Sampler] = _sampler(random.truncated_normal)
    uniform: ClassVar[_Sampler] = _sampler(random.uniform)
    wald: ClassVar[_Sampler] = _sampler(random.wald)
    weibull_min: ClassVar[_Sampler] = _sampler(random.weibull_min)

    delta_orthogonal: ClassVar[_InitMaker] = _keyless(_inits.delta_orthogonal)
    glorot_normal: ClassVar[_InitMaker] = _keyless(_inits.glorot_normal)
    glorot_uniform: ClassVar[_InitMaker] = _keyless(_inits.glorot_uniform)
    he_normal: ClassVar[_InitMaker] = _keyless(_inits.he_normal)
    he_uniform: ClassVar[_InitMaker] = _keyless(_inits.he_uniform)
    kaiming_normal: ClassVar[_InitMaker] = _keyless(_inits.kaiming_normal)
    kaiming_uniform: ClassVar[_InitMaker] = _keyless(_inits.kaiming_uniform)
    lecun_normal: ClassVar[_InitMaker] = _keyless(_inits.lecun_normal)
    lecun_uniform: ClassVar[_InitMaker] = _keyless(_inits.lecun_uniform)
    variance_scaling: ClassVar[_InitMaker] = _keyless(_inits.variance_scaling)
    xavier_normal: ClassVar[_InitMaker] = _keyless(_inits.xavier_normal)
    xavier_uniform: ClassVar[_InitMaker] = _keyless(_inits.xavier_uniform)


# ----------------------------------------------------------------------------- streams


def _as_key(key: Any) -> jax.Array:
    if isinstance(key, int):
        key = random.key(key)
    elif isinstance(key, jax.Array) and key.dtype == jnp.uint32:
        key = random.wrap_key_data(key)
    if not isinstance(key, jax.Array) or not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        raise ValueError(
            f"Invalid rng value: {key}, expected a jax.Array of jax.dtypes.prng_key sub-dtype"
        )
    return key


def _as_shape(k: SplitShape) -> tuple[int, ...]:
    return (k,) if isinstance(k, int) else tuple(k)


def _warn_fork_split() -> None:
    warnings.warn(
        "The 'split' argument of 'fork' is deprecated; use the 'split' method instead.",
        DeprecationWarning,
        stacklevel=3,
    )


class RngStream(Pytree, _Random):
    """One named stream: ``stream()`` returns ``fold_in(key, count)`` and adds one to
    ``count``. The key may be an int seed, a typed key or a raw ``uint32`` key; a key of
    shape ``s`` (after ``split``) gives keys of shape ``s``, one per position."""

    tag: str
    key: RngKey
    count: RngCount

    def __init__(self, key: RngValue, *, tag: str) -> None:
        key = _as_key(key)
        self.tag = tag
        self.key = RngKey(key, tag=tag)
        self.count = RngCount(jnp.zeros(key.shape, dtype=jnp.uint32), tag=tag)

    def __call__(self) -> jax.Array:
        count = self.count
        count._check_can_update()
        key = random.fold_in(self.key.get_value(), count.get_value())
        count.set_value(count.get_value() + 1)
        return key

    def split(self, k: SplitShape) -> "RngStream":
        """A new stream whose key is this stream's next key split into shape ``k``."""
        return type(self)(random.split(self(), k), tag=self.tag)

    def fork(self, *, split: SplitShape | None = None) -> "RngStream":
        """A new stream seeded by this stream's next key (``split=`` is deprecated)."""
        if split is not None:
            _warn_fork_split()
        return self._fork(split)

    def _fork(self, split: SplitShape | None) -> "RngStream":
        key = self()
        if split is not None:
            key = random.split(key, split)
        return type(self)(key, tag=self.tag)

    def broadcast(self, k: SplitShape) -> "RngStream":
        """A new stream whose key is this stream's next key repeated to shape ``k`` (every
        position the same key)."""
        key = self()
        return type(self)(jnp.broadcast_to(key, _as_shape(k) + key.shape), tag=self.tag)


def _per_stream(
    spec: Mapping[Filter, Any] | SplitShape | None, default: Mapping[Filter, Any]
) -> list[tuple[Callable[..., bool], Any]]:
    """``(predicate, value)`` for a shape-or-mapping argument (a shape means all streams)."""
    if spec is None:
        spec = default
    elif isinstance(spec, int | tuple):
        spec = {...: spec}
    return [(filterlib.to_predicate(f), v) for f, v in spec.items()]


def _first_match(rules: list[tuple[Callable[..., bool], Any]], stream: RngStream) -> Any:
    for predicate, value in rules:
        if predicate((), stream):
            return value
    return MISSING


class Rngs(Pytree, _Random):
    """Named RNG streams: ``Rngs(0, dropout=1)`` has streams ``default`` and ``dropout``.

    ``rngs.params()`` and ``rngs['params']()`` give the next key of stream ``params``, or
    of ``default`` if there is no such stream (no ``default`` either: ``AttributeError``,
    respectively ``KeyError``). ``rngs()`` uses ``default``; ``rngs.normal(shape)`` and the
    other samplers draw their key from ``default``, ``rngs.params.normal(shape)`` from
    ``params``.

    >>> from adapters import nnx
    >>> rngs = nnx.Rngs(0, params=1)
    >>> rngs.params.key.shape, int(rngs.params.count[...])
    ((), 0)
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

    def _get_stream(self, name: str, error_type: type[Exception]) -> RngStream:
        streams = vars(self)
        if name in streams:
            return streams[name]
        if "default" not in streams:
            raise error_type(f"No RngStream named '{name}' found in Rngs.")
        return streams["default"]

    def __getitem__(self, name: str) -> RngStream:
        return self._get_stream(name, KeyError)

    def __getattr__(self, name: str) -> RngStream:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._get_stream(name, AttributeError)

    def __call__(self) -> jax.Array:
        return self._get_stream("default", AttributeError)()

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self.items())

    def __len__(self) -> int:
        return sum(1 for _ in self.items())

    def __contains__(self, name: object) -> bool:
        return name in vars(self)

    def items(self) -> Iterator[tuple[str, RngStream]]:
        """``(name, stream)`` for every stream."""
        return ((n, s) for n, s in list(vars(self).items()) if isinstance(s, RngStream))

    def split(self, k: Mapping[Filter, SplitShape | None] | SplitShape) -> "Rngs":
        """New Rngs whose streams' keys are each stream's next key split into shape ``k``;
        a mapping ``{filter: shape_or_None}`` chooses per stream (first match; ``None`` or
        no match: the stream is kept as it is)."""
        rules = _per_stream(k, {})
        new: dict[str, RngStream] = {}
        for name, stream in self.items():
            shape = _first_match(rules, stream)
            new[name] = stream if shape is None or shape is MISSING else stream.split(shape)
        return Rngs(**new)

    def broadcast(self, k: Mapping[Filter, SplitShape | None] | SplitShape | None) -> "Rngs":
        """New Rngs whose streams' keys are each stream's next key repeated to shape ``k``;
        a mapping chooses per stream as in ``split``."""
        rules = _per_stream(k, {...: None})
        new: dict[str, RngStream] = {}
        for name, stream in self.items():
            shape = _first_match(rules, stream)
            if shape is None or shape is MISSING:
                new[name] = stream
            else:
                new[name] = stream.broadcast(shape)
        return Rngs(**new)

    def fork(self, /, *, split: Mapping[Filter, SplitShape] | SplitShape | None = None) -> "Rngs":
        """New Rngs whose streams are seeded by each stream's next key (``split=`` is
        deprecated: use ``split``)."""
        if split is not None:
            _warn_fork_split()
        rules = _per_stream(split, {})
        new: dict[str, RngStream] = {}
        for name, stream in self.items():
            shape = _first_match(rules, stream)
            new[name] = stream._fork(None if shape is MISSING else shape)
        return Rngs(**new)


# ----------------------------------------------------------------------------- backups

StreamBackup = tuple[RngStream, jax.Array, jax.Array] | tuple[RngStream, jax.Array]


class SplitBackups(Iterable[StreamBackup]):
    """The streams an in-place ``split_rngs``/``fork_rngs`` changed, with their former
    keys and counters: ``restore_rngs(backups)`` (or the end of ``with backups:``) puts
    them back."""

    def __init__(self, backups: list[StreamBackup]) -> None:
        self.backups = backups

    def __iter__(self) -> Iterator[StreamBackup]:
        return iter(self.backups)

    def __len__(self) -> int:
        return len(self.backups)

    def __enter__(self) -> "SplitBackups":
        return self

    def __exit__(self, *exc: object) -> None:
        restore_rngs(self)


def restore_rngs(backups: Iterable[StreamBackup], /) -> None:
    """Put back the keys (and counters) recorded by ``split_rngs``/``fork_rngs``/
    ``backup_keys``."""
    for backup in backups:
        stream = backup[0]
        stream.key.set_value(backup[1])
        if len(backup) == 3:
            stream.count.set_value(backup[2])


def backup_keys(node: Any, /, *, graph: bool | None = None) -> list[StreamBackup]:
    """``(stream, key)`` for every stream in ``node``, for ``restore_rngs``."""
    return [
        (stream, stream.key.get_value())
        for _, stream in graphlib.iter_graph(node, graph=graph)
        if isinstance(stream, RngStream)
    ]


# ----------------------------------------------------------------------------- graph helpers


def _modes(graph: bool | None, graph_updates: bool | None) -> tuple[bool, bool]:
    if graph is None:
        graph = bool(graphlib.set_graph_mode.current_value())
    if graph_updates is None:
        graph_updates = bool(graphlib.set_graph_updates.current_value())
    return graph, graph_updates


def _selects(predicate: Callable[..., bool], path: tuple[Any, ...], stream: RngStream) -> bool:
    """Whether a filter selects a stream: it must select both its key and its counter."""
    return predicate((*path, "key"), stream.key) and predicate((*path, "count"), stream.count)


def _split_counts_shape(count: Any, splits: SplitShape, squeeze: bool) -> tuple[int, ...]:
    if squeeze:
        return tuple(count.shape)
    return (*_as_shape(splits), *count.shape)


def _split_key(stream: RngStream, splits: SplitShape, squeeze: bool) -> jax.Array:
    key = random.split(stream(), splits)
    return key[0] if squeeze else key


def _split_in_place(node: Any, splits: SplitShape, only: Filter, squeeze: bool) -> SplitBackups:
    predicate = filterlib.to_predicate(only)
    backups: list[StreamBackup] = []
    for path, stream in graphlib.iter_graph(node, graph=True):
        if isinstance(stream, RngStream) and _selects(predicate, path, stream):
            key = _split_key(stream, splits, squeeze)
            backups.append((stream, stream.key.get_value(), stream.count.get_value()))
            stream.key.set_value(key)
            shape = _split_counts_shape(stream.count.get_value(), splits, squeeze)
            stream.count.set_value(jnp.zeros(shape, dtype=jnp.uint32))
    return SplitBackups(backups)


def _split_copy(node: Any, splits: SplitShape, only: Filter, squeeze: bool, graph: bool) -> Any:
    predicate = filterlib.to_predicate(only)

    def split_stream(path: tuple[Any, ...], value: Any) -> Any:
        if isinstance(value, RngStream) and _selects(predicate, path, value):
            key = _split_key(value, splits, squeeze)
            shape = _split_counts_shape(value.count.get_value(), splits, squeeze)
            value.key = RngKey(key, tag=value.tag)
            value.count = RngCount(jnp.zeros(shape, dtype=jnp.uint32), tag=value.tag)
        return value

    return graphlib.recursive_map(split_stream, node, graph=graph)


def _decorator(
    transform: Callable[[Any, bool, bool], Any], graph: bool, graph_updates: bool
) -> Callable[[F], F]:
    """A decorator applying ``transform((args, kwargs), graph, graph_updates)`` to the
    arguments of each call: in place and undone after the call, or on a copy."""

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if graph and graph_updates:
                with transform((args, kwargs), True, True):
                    return f(*args, **kwargs)
            args, kwargs = transform((args, kwargs), graph, False)
            return f(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


@overload
def split_rngs(
    node: A,
    /,
    *,
    splits: SplitShape,
    only: Filter = ...,
    squeeze: bool = False,
    graph: Literal[False],
    graph_updates: bool | None = None,
) -> A: ...
@overload
def split_rngs(
    node: A,
    /,
    *,
    splits: SplitShape,
    only: Filter = ...,
    squeeze: bool = False,
    graph: Literal[True] | None = None,
    graph_updates: Literal[False],
) -> A: ...
@overload
def split_rngs(
    node: Any,
    /,
    *,
    splits: SplitShape,
    only: Filter = ...,
    squeeze: bool = False,
    graph: Literal[True] | None = None,
    graph_updates: Literal[True] | None = None,
) -> SplitBackups: ...
@overload
def split_rngs(
    *,
    splits: SplitShape,
    only: Filter = ...,
    squeeze: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[[F], F]: ...
@overload
def split_rngs(
    node: Any,
    /,
    *,
    splits: SplitShape,
    only: Filter = ...,
    squeeze: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any: ...
def split_rngs(
    node: Any = MISSING,
    /,
    *,
    splits: SplitShape,
    only: Filter = ...,
    squeeze: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Split the streams in ``node`` selected by ``only``: each gets its next key split
    into shape ``splits`` and counters of that shape (``squeeze=True`` with ``splits=1``
    keeps the shape, taking the first of the split keys).

    With ``graph=True, graph_updates=True`` (the defaults) the streams change in place and
    a ``SplitBackups`` is returned (a context manager; ``restore_rngs`` undoes it);
    otherwise a copy of ``node`` with new streams is returned. Without ``node``,
    ``split_rngs`` is a decorator doing this to the arguments of every call (in place:
    undone when the call returns).
    """
    graph, graph_updates = _modes(graph, graph_updates)
    if isinstance(node, Missing):
        return _decorator(
            lambda n, g, u: split_rngs(
                n, splits=splits, only=only, squeeze=squeeze, graph=g, graph_updates=u
            ),
            graph,
            graph_updates,
        )
    if squeeze and splits != 1:
        raise ValueError("squeeze=True is only supported for splits=1")
    if graph and graph_updates:
        return _split_in_place(node, splits, only, squeeze)
    return _split_copy(node, splits, only, squeeze, graph)


@overload
def fork_rngs(
    node: A,
    /,
    *,
    split: Mapping[Filter, SplitShape | None] | SplitShape | None = None,
    graph: Literal[False],
    graph_updates: bool | None = None,
) -> A: ...
@overload
def fork_rngs(
    node: A,
    /,
    *,
    split: Mapping[Filter, SplitShape | None] | SplitShape | None = None,
    graph: Literal[True] | None = None,
    graph_updates: Literal[False],
) -> A: ...
@overload
def fork_rngs(
    node: Any,
    /,
    *,
    split: Mapping[Filter, SplitShape | None] | SplitShape | None = None,
    graph: Literal[True] | None = None,
    graph_updates: Literal[True] | None = None,
) -> SplitBackups: ...
@overload
def fork_rngs(
    *,
    split: Mapping[Filter, SplitShape | None] | SplitShape | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[[F], F]: ...
@overload
def fork_rngs(
    node: Any,
    /,
    *,
    split: Mapping[Filter, SplitShape | None] | SplitShape | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any: ...
def fork_rngs(
    node: Any = MISSING,
    /,
    *,
    split: Mapping[Filter, SplitShape | None] | SplitShape | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Fork the streams in ``node``: each is reseeded with its next key (split to a shape
    where ``split`` asks for one, deprecated). In place with a ``SplitBackups`` returned,
    on a copy, or as a decorator, as for ``split_rngs``.
    """
    graph, graph_updates = _modes(graph, graph_updates)
    if isinstance(node, Missing):
        return _decorator(
            lambda n, g, u: fork_rngs(n, split=split, graph=g, graph_updates=u),
            graph,
            graph_updates,
        )
    if split is None:
        split = {...: None}
    elif isinstance(split, int | tuple):
        split = {...: split}
    rules = [(filterlib.to_predicate(f), v) for f, v in split.items()]
    if graph and graph_updates:
        backups: list[StreamBackup] = []
        for path, stream in graphlib.iter_graph(node, graph=True):
            if not isinstance(stream, RngStream):
                continue
            for predicate, shape in rules:
                if _selects(predicate, path, stream):
                    forked = stream._fork(shape)
                    backups.append((stream, stream.key.get_value(), stream.count.get_value()))
                    stream.key.set_value(forked.key.get_value())
                    stream.count.set_value(forked.count.get_value())
        return SplitBackups(backups)

    def fork_stream(path: tuple[Any, ...], value: Any) -> Any:
        if isinstance(value, RngStream):
            for predicate, shape in rules:
                if _selects(predicate, path, value):
                    return value._fork(shape)
        return value

    return graphlib.recursive_map(fork_stream, node, graph=graph)


def _rule_list(spec: Mapping[Filter, Any] | SplitShape | None) -> list[tuple[Any, Any, Any]]:
    if spec is None:
        spec = {}
    elif isinstance(spec, int | tuple):
        spec = {...: spec}
    return [(f, filterlib.to_predicate(f), v) for f, v in spec.items()]


def _check_one_rule(path: tuple[Any, ...], matched: dict[str, Any]) -> None:
    """A stream chosen by two rules through specific filters (not ``...``/``True``) is
    ambiguous."""
    specific = [rule for rule, filt in matched.items() if filt is not Ellipsis and filt is not True]
    if len(matched) > 1 and len(specific) > 1:
        lines = "\n".join(f"  - {rule} matches filter {filt!r}" for rule, filt in matched.items())
        raise ValueError(f"RngStream at path {path} matches multiple rules:\n{lines}")


def with_rngs(
    node: Any = MISSING,
    /,
    *,
    split: Mapping[Filter, SplitShape] | SplitShape | None = None,
    fork: Filter | Sequence[Filter] | None = None,
    broadcast: Mapping[Filter, SplitShape] | SplitShape | None = None,
    only: Filter = True,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """A copy of ``node`` whose streams selected by ``only`` are replaced: split (``split``:
    a shape, or ``{filter: shape}`` with the first match winning), else broadcast
    (``broadcast``, alike), else forked (``fork``: a filter or filters); other streams are
    copied unchanged. Each replacement consumes one key of the original stream. Without
    ``node`` it is a decorator doing this to the arguments of each call. There is no
    in-place form: ``graph=True`` with ``graph_updates=True`` raises.
    """
    graph, graph_updates = _modes(graph, graph_updates)
    if graph and graph_updates:
        raise NotImplementedError(
            "graph=True and graph_updates=True is not supported for `with_rngs`"
        )
    if isinstance(node, Missing):

        def decorate(f: F) -> F:
            @functools.wraps(f)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                args, kwargs = with_rngs(
                    (args, kwargs), split=split, fork=fork, broadcast=broadcast,
                    only=only, graph=graph, graph_updates=False,
                )  # fmt: skip
                return f(*args, **kwargs)

            return cast(F, wrapper)

        return decorate
    split_rules, broadcast_rules = _rule_list(split), _rule_list(broadcast)
    if fork is None:
        fork = []
    elif isinstance(fork, str) or not isinstance(fork, Sequence):
        fork = [fork]
    fork_rules = [(f, filterlib.to_predicate(f), None) for f in fork]
    only_predicate = filterlib.to_predicate(only)

    def update(path: tuple[Any, ...], value: Any) -> Any:
        if not (isinstance(value, RngStream) and only_predicate(path, value)):
            return value
        matched: dict[str, Any] = {}
        chosen: dict[str, Any] = {}
        for rule, rules in (("split", split_rules), ("broadcast", broadcast_rules)):
            for filt, predicate, shape in rules:
                if predicate(path, value):
                    matched[rule], chosen[rule] = filt, shape
                    break
        for filt, predicate, _ in fork_rules:
            if predicate(path, value):
                matched["fork"] = filt
                break
        _check_one_rule(path, matched)
        if "split" in chosen:
            return value.split(chosen["split"])
        if "broadcast" in chosen:
            return value.broadcast(chosen["broadcast"])
        if "fork" in matched:
            return value.fork()
        return value

    return graphlib.recursive_map(update, node, graph=graph)


# ----------------------------------------------------------------------------- reseed

_Policy = Callable[[tuple[Any, ...], jax.Array, tuple[int, ...]], jax.Array]


def _scalars_only(path: tuple[Any, ...], key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    if shape != ():
        raise ValueError(
            f"Cannot reseed stream at path {path!r} becuase it has a non-scalar key, "
            f"found key with shape {shape}. If all your multi-dimensional "
            'keys have unique values on all dimensions, set policy="match_shape", '
            "else provide a custom reseed policy."
        )
    return key


def _match_shape(path: tuple[Any, ...], key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return key if shape == () else random.split(key, shape)


def reseed(
    node: Any,
    /,
    *,
    graph: bool | None = None,
    policy: Literal["scalars_only", "match_shape"] | _Policy = "scalars_only",
    **stream_keys: RngValue,
) -> None:
    """Give the streams named in ``stream_keys`` new keys, in place, and reset their
    counters. Each stream of that name gets the next key of a new stream seeded with the
    given value; ``policy`` turns it into the stream's key shape (``"scalars_only"``:
    scalar keys only, ``"match_shape"``: split to the shape, or a function
    ``(path, key, shape) -> key``).
    """
    if policy == "scalars_only":
        policy = _scalars_only
    elif policy == "match_shape":
        policy = _match_shape
    elif not callable(policy):
        raise ValueError(
            f'policy must be "scalars_only", "match_shape" or a callable, got {policy!r}'
        )
    seeds = Rngs(**stream_keys)
    for path, stream in graphlib.iter_graph(node, graph=graph):
        if isinstance(stream, RngStream) and stream.key.tag in stream_keys:
            key = policy(path, seeds[stream.key.tag](), tuple(stream.key.get_value().shape))
            stream.key.set_value(key)
            stream.count.set_value(jnp.zeros(key.shape, dtype=jnp.uint32))
