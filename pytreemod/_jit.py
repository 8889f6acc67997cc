"""``jit``: ``jax.jit`` over any arguments; arrays are traced, everything else is static.

Dispatch is built to cost what ``jax.jit`` costs. Per call the wrapper flattens the
arguments once on JAX's C++ path (modules and variables are C++ dataclass nodes), then:

- **fast path**: every leaf is an array and no array occurs twice: the treedef alone
  keys the cache and the leaves go straight to the compiled function;
- **static path**: some leaves are not arrays (functions, Python numbers, strings): the
  treedef and those leaves key the cache;
- **shared path**: an array occurs twice, which is how a Variable shared by two places
  (tied weights) looks after flattening: the arguments are packed by Variable identity
  (``_pack``), so the tie survives into the traced function and out of it.

Outputs are split the same way when the function is traced; the per-call work is one
``tree_unflatten`` (plus filling in static leaves if the output has any).
"""

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, overload

import jax
import jax.tree_util as jtu

from ._codegen import compile_unflatten
from ._errors import TransformError
from ._filters import FilterLike, to_filter
from ._pack import Skeleton, pack, unpack
from ._tree import format_path, is_array

P = ParamSpec("P")
R = TypeVar("R")

_flatten = jtu.tree_flatten
_unflatten = jtu.tree_unflatten
_ARRAY_TYPES: set[type] = set()
_NOT_ARRAY_TYPES: set[type] = set()


def _all_arrays(leaves: list[Any]) -> bool:
    types = set(map(type, leaves))
    if types <= _ARRAY_TYPES:
        return True
    for t, leaf in zip(map(type, leaves), leaves):
        if t in _ARRAY_TYPES:
            continue
        if t in _NOT_ARRAY_TYPES:
            return False
        if is_array(leaf):
            _ARRAY_TYPES.add(t)
        else:
            _NOT_ARRAY_TYPES.add(t)
            return False
    return True


@dataclasses.dataclass(frozen=True)
class DonateState:
    """Donate the arrays of argument ``argnum`` that ``filter`` selects (``jit`` only).

    ``jit(step, donate_argnums=(DonateState(0, "params"),))`` lets XLA reuse the buffers of
    the model's parameters for the updated parameters.
    """

    argnum: int
    filter: FilterLike = True


class _Out:
    """How to rebuild the output of one traced function from its arrays."""

    __slots__ = ("build", "kind", "skeleton", "static", "treedef")

    def __init__(self, out: Any):
        leaves, treedef = _flatten(out)
        self.treedef = treedef
        self.skeleton: Skeleton | None = None
        self.static: dict[int, Any] = {}
        if len(set(map(id, leaves))) != len(leaves):
            # A Variable shared by several places: rebuild it shared.
            self.kind = "shared"
            skeleton = self.skeleton = pack(out)[0]
            self.build: Callable[[Any], Any] = lambda arrays: unpack(skeleton, arrays)
            return
        self.static = {i: x for i, x in enumerate(leaves) if not is_array(x)}
        if jtu.treedef_is_leaf(treedef) and not self.static:
            self.kind = "single"
            self.build = _identity
        else:
            self.kind = "tree"
            self.build = compile_unflatten(treedef, self.static)

    def split(self, out: Any) -> Any:
        if self.kind == "single":
            return out
        if self.kind == "shared":
            return pack(out)[1]
        return [x for x in _flatten(out)[0] if is_array(x)]

    def same(self, other: "_Out") -> bool:
        return (
            self.kind == other.kind
            and self.treedef == other.treedef
            and self.skeleton == other.skeleton
            and _static_eq(self.static, other.static)
        )


def _identity(x: Any) -> Any:
    return x


def _static_eq(a: dict[int, Any], b: dict[int, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k] is b[k] or _eq(a[k], b[k]) for k in a)


def _eq(x: Any, y: Any) -> bool:
    try:
        return type(x) is type(y) and bool(x == y)
    except Exception:
        return False


class _Entry:
    """One compiled function: a ``jax.jit`` object plus how to rebuild its outputs."""

    __slots__ = ("ambiguous", "build", "by_aval", "donate", "fast", "jitted", "out", "single")

    def __init__(self) -> None:
        self.jitted: Any = None
        self.out: _Out | None = None
        self.ambiguous = False
        self.fast = False  # usable by the fast path: traced once, output rebuild known
        self.single = False
        self.build: Callable[[Any], Any] = _identity
        self.by_aval: dict[Any, _Entry] = {}
        self.donate: tuple[int, ...] = ()

    def record(self, out: Any) -> Any:
        spec = _Out(out)
        if self.out is not None and not self.out.same(spec):
            # Retraced (new shapes) and the output's static part changed: from now on,
            # calls are keyed by input shapes too.
            self.ambiguous = True
        self.out = spec
        self.single = spec.kind == "single"
        self.build = spec.build
        self.fast = not self.ambiguous
        return spec.split(out)


def _call_form(fun_is_tree: bool, has_kwargs: bool) -> Callable[[Any], tuple[Any, Any, Any]]:
    """How the flattened call tree splits back into (function, args, kwargs)."""
    if fun_is_tree:
        if has_kwargs:
            return lambda t: (t[0], t[1], t[2])
        return lambda t: (t[0], t[1], {})
    if has_kwargs:
        return lambda t: (None, t[0], t[1])
    return lambda t: (None, t, {})


class _JitWrapper(Generic[P, R]):
    def __init__(
        self,
        fun: Callable[P, R],
        donate_argnums: Sequence[int | DonateState],
        jit_kwargs: dict[str, Any],
    ):
        self._fun = fun
        self._fun_is_tree = not jtu.treedef_is_leaf(jtu.tree_structure(fun))
        self._donate = tuple(
            d if isinstance(d, DonateState) else DonateState(d, True) for d in donate_argnums
        )
        self._jit_kwargs = jit_kwargs
        self._cache: dict[Any, _Entry] = {}

    def make_call(self) -> Callable[P, R]:
        """The function users call. Its common case (every leaf an array, no leaf twice, a
        compiled entry for this treedef) is a handful of C-level operations."""
        cache = self._cache
        flatten = _flatten
        all_arrays = _all_arrays
        slow = self._slow
        fun = self._fun
        fun_is_tree = self._fun_is_tree

        def call(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if kwargs:
                tree = (fun, args, kwargs) if fun_is_tree else (args, kwargs)
            else:
                tree = (fun, args) if fun_is_tree else args
            leaves, treedef = flatten(tree)
            if len(set(map(id, leaves))) == len(leaves) and all_arrays(leaves):
                entry = cache.get(treedef)
                if entry is not None and entry.fast:
                    out = entry.jitted(*leaves)
                    return out if entry.single else entry.build(out)
            return slow(tree, leaves, treedef, bool(kwargs))

        functools.update_wrapper(call, fun)  # type: ignore[arg-type]
        call.lower = self.lower  # type: ignore[attr-defined]
        call._pytreemod_jit = self  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    def _slow(self, tree: Any, leaves: list[Any], treedef: Any, has_kwargs: bool) -> Any:
        """First calls, static or shared leaves, and shape-dependent outputs."""
        entry, dyn = self._resolve(tree, leaves, treedef, has_kwargs)
        out = entry.jitted(*dyn)  # first: tracing sets entry.build
        return entry.build(out)

    def _resolve(
        self, tree: Any, leaves: list[Any], treedef: Any, has_kwargs: bool
    ) -> tuple[_Entry, list[Any]]:
        """The compiled entry for a call tree, and the arrays to pass to it."""
        if len(set(map(id, leaves))) == len(leaves):
            if _all_arrays(leaves):
                key: Any = treedef
                info: Any = None
                kind = "plain"
                dyn = leaves
            else:
                static = tuple(None if is_array(x) else x for x in leaves)
                # The types too: 1, 1.0 and True are equal and hash alike, but trace apart.
                key = (treedef, self._hashable(static, tree, has_kwargs), tuple(map(type, static)))
                info = (treedef, static)
                kind = "static"
                dyn = [x for x in leaves if is_array(x)]
        else:
            skeleton, dyn, _ = pack(tree)
            self._hashable(tuple(x for x in leaves if not is_array(x)), tree, has_kwargs)
            key = ("shared", skeleton)
            info = skeleton
            kind = "shared"
        entry = self._cache.get(key)
        if entry is None:
            entry = self._new_entry(key, kind, tree, info, has_kwargs)
        if entry.ambiguous:
            entry = self._by_aval(entry, dyn)
        return entry, dyn

    def _by_aval(self, entry: _Entry, dyn: list[Any]) -> _Entry:
        avals = tuple((x.shape, x.dtype, getattr(x, "weak_type", False)) for x in dyn)
        sub = entry.by_aval.get(avals)
        if sub is None:
            sub = _Entry()
            traced = entry.jitted.__wrapped__
            sub.donate = entry.donate  # same arguments, so the same donation
            sub.jitted = jax.jit(
                lambda *dyn: traced(*dyn, _entry=sub),
                donate_argnums=sub.donate,
                **self._jit_kwargs,
            )
            entry.by_aval[avals] = sub
        return sub

    def _hashable(self, static: tuple[Any, ...], tree: Any, has_kwargs: bool) -> tuple[Any, ...]:
        try:
            hash(static)
        except TypeError:
            f, a, k = _call_form(self._fun_is_tree, has_kwargs)(tree)
            named = (("fun", f), ("args", a), ("kwargs", k))
            for name, part in named:
                for kp, leaf in jtu.tree_flatten_with_path(part)[0]:
                    if is_array(leaf):
                        continue
                    try:
                        hash(leaf)
                    except TypeError:
                        raise TransformError(
                            f"jit: the argument leaf at {name}{format_path(kp)} is a "
                            f"{type(leaf).__name__}, which is neither an array nor hashable. "
                            "Non-array leaves are compile-time constants and must be "
                            "hashable: convert it to an array (jnp.asarray) or to a "
                            "hashable value (a tuple instead of a list)."
                        ) from None
            raise
        return static

    def _new_entry(self, key: Any, kind: str, tree: Any, info: Any, has_kwargs: bool) -> _Entry:
        entry = _Entry()
        fun: Callable[..., Any] = self._fun
        split_call = _call_form(self._fun_is_tree, has_kwargs)

        if kind == "plain":
            treedef = key

            def rebuild(dyn: Sequence[Any]) -> Any:
                return _unflatten(treedef, dyn)
        elif kind == "static":
            treedef, static = info
            positions = [i for i, s in enumerate(static) if s is None]

            def rebuild(dyn: Sequence[Any]) -> Any:
                leaves = list(static)
                for pos, x in zip(positions, dyn):
                    leaves[pos] = x
                return _unflatten(treedef, leaves)
        else:
            skeleton = info

            def rebuild(dyn: Sequence[Any]) -> Any:
                return unpack(skeleton, dyn)

        def traced(*dyn: Any, _entry: _Entry = entry) -> Any:
            f, a, k = split_call(rebuild(dyn))
            return _entry.record((f if f is not None else fun)(*a, **k))

        f_, a_, k_ = split_call(tree)
        donate = self._donate_positions(f_, a_, k_) if self._donate else ()
        entry.donate = donate
        entry.jitted = jax.jit(traced, donate_argnums=donate, **self._jit_kwargs)
        self._cache[key] = entry
        return entry

    def _donate_positions(self, fun: Any, args: Any, kwargs: Any) -> tuple[int, ...]:
        """Positions (among the traced arrays) of the arrays selected for donation."""
        full = (fun if self._fun_is_tree else None, args, kwargs)
        skeleton, _, slot_values = pack(full)
        value_of = dict(zip(skeleton.slots, slot_values))
        filters = [(d.argnum, to_filter(d.filter)) for d in self._donate]
        positions = []
        for i, slot in enumerate(skeleton.array_slots()):
            path = skeleton.path(slot)
            if path[0] != 1:  # the function itself, or keyword arguments
                continue
            for argnum, filt in filters:
                if path[1] == argnum and filt(path[2:], value_of[slot]):
                    positions.append(i)
                    break
        return tuple(positions)

    def lower(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Lower for ``(args, kwargs)`` without running: ``.lower(...).compile()``.

        Goes through the same compiled entry a call would use, so the lowered program
        (donation included) is exactly the one a call runs.
        """
        if kwargs:
            tree = (self._fun, args, kwargs) if self._fun_is_tree else (args, kwargs)
        else:
            tree = (self._fun, args) if self._fun_is_tree else args
        leaves, treedef = _flatten(tree)
        entry, dyn = self._resolve(tree, leaves, treedef, bool(kwargs))
        return entry.jitted.lower(*dyn)


@overload
def jit(
    fun: Callable[P, R],
    *,
    donate_argnums: int | Sequence[int | DonateState] = (),
    **jit_kwargs: Any,
) -> Callable[P, R]: ...


@overload
def jit(
    fun: None = None,
    *,
    donate_argnums: int | Sequence[int | DonateState] = (),
    **jit_kwargs: Any,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def jit(
    fun: Callable[P, R] | None = None,
    *,
    donate_argnums: int | Sequence[int | DonateState] = (),
    **jit_kwargs: Any,
) -> Any:
    """Compile ``fun`` with ``jax.jit``, taking any arguments (Equinox's ``filter_jit``).

    Arrays anywhere in the arguments (modules included) are traced; every other leaf
    (functions, strings, Python numbers) is a compile-time constant, and a new value of
    one compiles a new version. A Variable shared by several places of the arguments stays
    one value inside and comes back shared. ``fun`` may itself be a Module or bound method,
    whose arrays are then traced too.

    **Arguments:**

    - ``fun``: the function (or decorate with ``@pm.jit`` / ``@pm.jit(...)``).
    - ``donate_argnums``: positional arguments whose arrays XLA may reuse for outputs;
      entries are ints or ``DonateState(argnum, filter)`` to donate only selected state.
    - ``**jit_kwargs``: passed to ``jax.jit`` (e.g. ``in_shardings``/``out_shardings``
      over the flat list of traced arrays is not supported; shard the arrays themselves
      with ``jax.device_put`` instead: ``jit`` follows their shardings).

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> @pm.jit
    ... def scale(x, factor, name="scaled"):
    ...     return {name: x * factor}
    >>> scale(jnp.ones(2), 3.0)
    {'scaled': Array([3., 3.], dtype=float32)}
    """
    if isinstance(donate_argnums, int):
        donate_argnums = (donate_argnums,)
    for bad in ("static_argnums", "static_argnames", "donate_argnames"):
        if bad in jit_kwargs:
            raise TransformError(
                f"jit does not take {bad}: non-array arguments are already static, and "
                "arrays are donated with donate_argnums=(DonateState(argnum, filter),)."
            )
    if fun is None:
        return lambda f: _JitWrapper(f, donate_argnums, jit_kwargs).make_call()
    return _JitWrapper(fun, donate_argnums, jit_kwargs).make_call()


filter_jit = jit
