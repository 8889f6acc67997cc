"""``jit``: ``jax.jit`` over any arguments; arrays are traced, everything else is static.

Dispatch is built to cost what ``jax.jit`` costs. Two things make a call expensive in
Python: walking every leaf (to find non-array leaves, which are static, and Variables
reached twice, which are tied) and building the output modules. The first is avoided by
recognising arguments instead of walking them:

- **fast path** (``_jit_patterns``): the arguments match a pattern learned from an
  earlier checked call (``_Pattern``): arrays, and tuples, lists and dicts of arrays and
  of modules, where each module is one of the previous output (built by the call, so it
  shares no Variable with anything older) or one the check saw. Modules are recognised
  through weak references, beside which their arrays are kept (the module holds them
  anyway; they are let go when it is freed: ``_Ref`` for a module the check saw,
  ``_Last`` for the previous output's), so recognising an argument never keeps it alive
  and a recognised module is never flattened: the compiled function is called on the
  flat list of arrays. The Python work is one generated function (test, then call) and
  the output builder.
- **plain path**: the first call, or an unknown argument: flatten, check that every leaf
  is an array and no leaf occurs twice, then as above. The treedef keys the cache.
- **static path**: some leaves are not arrays (functions, Python numbers, strings): the
  treedef and those leaves key the cache.
- **shared path**: a leaf occurs twice, which is how a Variable shared by two places
  (tied weights) looks after flattening: the arguments are packed by Variable identity
  (``_pack``), so the tie survives into the traced function and out of it.

Outputs are split when the function is traced; per call, a generated builder
(``_codegen``) rebuilds the output tree from its arrays.

Garbage collection: CPython starts a collection whenever the number of container objects
allocated minus those freed passes a threshold (700 by default). A step's output is a burst of such
objects (its arrays, and a module per layer and a Variable per parameter for each tree
that holds a model), while the previous step's output is freed only after the call
returns, when the caller rebinds its names. Counted during the burst, they start
collections that can find nothing to free (the new objects are alive and acyclic, the old
ones are freed by reference counting an instant later) and that promote the new output
into older generations, which makes full collections of the whole heap more frequent. The
builder therefore runs with the collector disabled (re-enabled in a ``finally``; left
alone if the caller had disabled it), so the burst and the frees that follow cancel out
in the count. Collection is deferred, never skipped: objects kept alive past the call
still count, and the next allocation after the call collects if the threshold is passed.
Tracing is never run with the collector off.

Recognising arguments by identity relies on models being immutable: a list or dict
inside a module changed in place after the module was passed to ``jit`` is not noticed.
"""

import dataclasses
import functools
import gc
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, ParamSpec, TypeVar, overload

import jax
import jax.tree_util as jtu

from ._codegen import compile_unflatten
from ._errors import TransformError, require_callable
from ._filters import FilterLike, check_collections, to_filter
from ._jit_patterns import _ARRAY_TYPES, _MISS, _keeper, _Last, _learn_pattern, _Pattern
from ._pack import Skeleton, pack, unpack
from ._retrace import DEFAULT_WARN_RETRACES, TraceLog
from ._tree import format_path, is_array

P = ParamSpec("P")
R = TypeVar("R")

_flatten = jtu.tree_flatten
_unflatten = jtu.tree_unflatten
gc_isenabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
_NOT_ARRAY_TYPES: set[type] = set()
_PATTERNS_PER_ENTRY = 4


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


def _build(entry: "_Entry", arrays: Any, last: "_Last | None") -> Any:
    """``entry.build(arrays)``, and the output's modules recorded in ``last`` (if given),
    with the cyclic garbage collector held off meanwhile (see "Garbage collection" in the
    module docstring)."""
    enabled = gc_isenabled()
    if enabled:
        gc_disable()
    try:
        out = entry.build(arrays)
        if last is not None and entry.keep is not None:
            last.items, last.arrays = entry.keep(out, arrays, last.drop)
            last.entry = entry
        return out
    finally:
        if enabled:
            gc_enable()


def _static_eq(a: dict[int, Any], b: dict[int, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k] is b[k] or _eq(a[k], b[k]) for k in a)


def _eq(x: Any, y: Any) -> bool:
    try:
        return type(x) is type(y) and bool(x == y)
    except Exception:
        return False


class _Entry:
    """One compiled function: a ``jax.jit`` object plus how to rebuild its outputs."""

    __slots__ = (
        "ambiguous",
        "build",
        "by_aval",
        "donate",
        "fast",
        "jitted",
        "keep",
        "kept",
        "out",
        "patterns",
        "plain",
        "single",
        "tjit",
    )

    def __init__(self) -> None:
        self.jitted: Any = None  # over the flat list of arrays
        self.tjit: Any = None  # over the argument trees themselves (lower() of plain entries)
        self.out: _Out | None = None
        self.ambiguous = False
        self.fast = False  # usable by the fast path: traced once, output rebuild known
        self.plain = False
        self.single = False
        self.build: Callable[[Any], Any] = _identity
        self.by_aval: dict[Any, _Entry] = {}
        self.donate: tuple[int, ...] = ()
        # References to the modules of an output (see _Last), or None.
        self.keep: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None
        self.kept: tuple[tuple[int, int], ...] = ()  # each kept module's slice of arrays
        self.patterns: list[_Pattern] = []  # the wrapper's patterns (shared list)

    def record(self, out: Any) -> Any:
        spec = _Out(out)
        if self.out is not None and not self.out.same(spec):
            # Retraced (new shapes) and the output's static part changed: from now on,
            # calls are keyed by input shapes too, and no pattern may skip that.
            self.ambiguous = True
            self.patterns[:] = [p for p in self.patterns if p.entry is not self]
        self.out = spec
        self.single = spec.kind == "single"
        self.build = spec.build
        self.fast = not self.ambiguous
        self.keep, self.kept = _keeper(spec)
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
        warn_retraces: int | None = DEFAULT_WARN_RETRACES,
    ):
        self._fun = fun
        self._traces = TraceLog(fun, warn_retraces)
        self._fun_is_tree = not jtu.treedef_is_leaf(jtu.tree_structure(fun))
        self._donate = tuple(
            d if isinstance(d, DonateState) else DonateState(d, True) for d in donate_argnums
        )
        # Whole-argument donation can be given to jax.jit as is; a filter that selects
        # part of an argument needs the flat list of arrays.
        self._tree_mode = all(d.filter is True for d in self._donate)
        self._jit_kwargs = jit_kwargs
        self._cache: dict[Any, _Entry] = {}
        self._last = _Last()
        self._patterns: list[_Pattern] = []  # most recently learned or used first

    def make_call(self) -> Callable[P, R]:
        """The function users call. Its common case (every argument an array, a piece of
        the previous output, or an object checked before) is one generated test, then
        JAX's own C++ dispatch, then the generated output builder."""
        patterns = self._patterns
        last = self._last
        flatten = _flatten
        slow = self._slow
        build = _build
        miss = _MISS
        fun = self._fun
        fun_is_tree = self._fun_is_tree

        def call(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if not kwargs:
                targs = (fun, *args) if fun_is_tree else args
                for pattern in patterns:
                    out = pattern.run(targs, last)
                    if out is not miss:
                        entry = pattern.entry
                        # Read after the call: a retrace (new shapes) may have replaced it.
                        if entry.single:
                            return out
                        return build(entry, out, last)
                tree = (fun, args) if fun_is_tree else args
            else:
                tree = (fun, args, kwargs) if fun_is_tree else (args, kwargs)
            leaves, treedef = flatten(tree)
            return slow(tree, leaves, treedef, args, kwargs)

        functools.update_wrapper(call, fun)  # type: ignore[arg-type]
        call.lower = self.lower  # type: ignore[attr-defined]
        call.clear_cache = self.clear_cache  # type: ignore[attr-defined]
        call._pytreemod_jit = self  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    def clear_cache(self) -> None:
        """Drop the compiled functions and every reference kept to recognise arguments."""
        self._cache.clear()
        self._patterns.clear()
        self._last.forget()
        self._traces.reset()

    def _slow(
        self, tree: Any, leaves: list[Any], treedef: Any, args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        """First calls, unknown arguments, static or shared leaves, shape-dependent outputs."""
        entry, dyn = self._resolve(tree, leaves, treedef, bool(kwargs))
        arrays = entry.jitted(*dyn)  # first: tracing sets entry.build
        out = _build(entry, arrays, None)
        if entry.plain and entry.fast and not kwargs:
            parts = treedef.children()
            if self._fun_is_tree:
                parts = [parts[0], *parts[1].children()]
            targs = (self._fun, *args) if self._fun_is_tree else args
            self._learn(entry, targs, parts)
        if entry.keep is not None and not entry.single:
            last = self._last
            last.items, last.arrays = entry.keep(out, arrays, last.drop)
            last.entry = entry
        return out

    def _learn(self, entry: _Entry, targs: tuple[Any, ...], parts: Sequence[Any]) -> None:
        """After a checked plain call: a pattern so the next such call skips the check."""
        pattern = _learn_pattern(entry, targs, parts, self._last)
        if pattern is None:
            return
        # Patterns whose objects are gone can never match again (the initial model of a
        # training loop); of the rest, a few per entry are kept, most recent first.
        self._patterns[:] = [p for p in self._patterns if p.alive()]
        mine = [p for p in self._patterns if p.entry is entry]
        for old in mine[_PATTERNS_PER_ENTRY - 1 :]:
            self._patterns.remove(old)
        self._patterns.insert(0, pattern)

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
            rebuild = entry.jitted.__wrapped__
            sub.donate = entry.donate  # same arguments, so the same donation
            sub.jitted = jax.jit(
                lambda *dyn: rebuild(*dyn, _entry=sub),
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
        entry.patterns = self._patterns
        fun: Callable[..., Any] = self._fun
        fun_is_tree = self._fun_is_tree
        split_call = _call_form(fun_is_tree, has_kwargs)

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

        traces = self._traces

        def traced(*dyn: Any, _entry: _Entry = entry) -> Any:
            f, a, k = split_call(rebuild(dyn))
            traces.note(f, a, k)
            return _entry.record((f if f is not None else fun)(*a, **k))

        f_, a_, k_ = split_call(tree)
        donate = self._donate_positions(f_, a_, k_) if self._donate else ()
        entry.donate = donate
        entry.plain = kind == "plain"
        entry.jitted = jax.jit(traced, donate_argnums=donate, **self._jit_kwargs)
        if entry.plain and self._tree_mode:
            # For lower(): a twin over the argument trees, so that the compiled program
            # takes the arguments as given. Calls use `jitted` (see _Pattern); a lowering
            # is not a call's trace, so it is not noted.
            def traced_tree(*targs: Any, **kwargs: Any) -> Any:
                f, a = (targs[0], targs[1:]) if fun_is_tree else (fun, targs)
                return entry.record(f(*a, **kwargs))

            offset = 1 if fun_is_tree else 0
            n_args = len(a_)
            whole = tuple(sorted({d.argnum + offset for d in self._donate if d.argnum < n_args}))
            entry.tjit = jax.jit(traced_tree, donate_argnums=whole, **self._jit_kwargs)
        self._cache[key] = entry
        return entry

    def _donate_positions(self, fun: Any, args: Any, kwargs: Any) -> tuple[int, ...]:
        """Positions (among the traced arrays) of the arrays selected for donation."""
        full = (fun if self._fun_is_tree else None, args, kwargs)
        skeleton, _, slot_values = pack(full)
        value_of = dict(zip(skeleton.slots, slot_values))
        filters = [(d.argnum, to_filter(d.filter)) for d in self._donate]
        for _, filt in filters:
            check_collections(filt, "jit: DonateState")
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

        Goes through the compiled entry a call would use: the lowered program traces the
        same function with the same donation. The compiled program returns the output's
        arrays as a flat list. It takes the arguments as given when every leaf is an
        array and no Variable is shared (a twin ``jax.jit`` over the argument trees; calls
        themselves pass the flat list of arrays); otherwise (and when a ``DonateState``
        filter selects part of an argument) it takes the flat list of traced arrays.
        """
        if kwargs:
            tree = (self._fun, args, kwargs) if self._fun_is_tree else (args, kwargs)
        else:
            tree = (self._fun, args) if self._fun_is_tree else args
        leaves, treedef = _flatten(tree)
        entry, dyn = self._resolve(tree, leaves, treedef, bool(kwargs))
        if entry.tjit is not None:
            targs = (self._fun, *args) if self._fun_is_tree else args
            return entry.tjit.lower(*targs, **kwargs)
        return entry.jitted.lower(*dyn)


@overload
def jit(
    fun: Callable[P, R],
    *,
    donate_argnums: int | Sequence[int | DonateState] | None = (),
    trace: Literal["arrays", "all"] = "arrays",
    warn_retraces: int | None = DEFAULT_WARN_RETRACES,
    **jit_kwargs: Any,
) -> Callable[P, R]: ...


@overload
def jit(
    fun: None = None,
    *,
    donate_argnums: int | Sequence[int | DonateState] | None = (),
    trace: Literal["arrays", "all"] = "arrays",
    warn_retraces: int | None = DEFAULT_WARN_RETRACES,
    **jit_kwargs: Any,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def jit(
    fun: Callable[P, R] | None = None,
    *,
    donate_argnums: int | Sequence[int | DonateState] | None = (),
    trace: Literal["arrays", "all"] = "arrays",
    warn_retraces: int | None = DEFAULT_WARN_RETRACES,
    **jit_kwargs: Any,
) -> Any:
    """Compile ``fun`` with ``jax.jit``, taking any arguments (Equinox's ``filter_jit``).

    Arrays anywhere in the arguments (modules included) are traced; every other leaf
    (functions, strings, Python numbers) is a compile-time constant, and a new value of
    one compiles a new version. A Variable shared by several places of the arguments stays
    one value inside and comes back shared. ``fun`` may itself be a Module or bound method,
    whose arrays are then traced too. With ``trace="all"``, arguments follow ``jax.jit``'s
    rule instead (see below).

    **Arguments:**

    - ``fun``: the function (or decorate with ``@pm.jit`` / ``@pm.jit(...)``).
    - ``donate_argnums``: positional arguments whose arrays XLA may reuse for outputs;
      entries are ints or ``DonateState(argnum, filter)`` to donate only selected state
      (``None``, with ``trace="all"``: completed from ``donate_argnames`` as by ``jax.jit``).
    - ``trace``: which argument leaves are traced. ``"arrays"`` (default): arrays, every
      other leaf static, as above (Equinox's ``filter_jit``). ``"all"``: ``jax.jit``'s
      rule, for code written against it: every leaf is traced (a Python number as a
      weakly typed scalar, so a new value does not compile again), only the arguments
      named by ``static_argnums``/``static_argnames`` are compile-time constants, and
      ``in_shardings``/``out_shardings`` are prefixes of the arguments and the output.
      The result is the ``jax.jit`` function itself (``.lower``, ``.trace``,
      ``.eval_shape``, JAX's own dispatch); a Variable shared by two places of the
      arguments enters as two values, as with ``jax.jit`` (``DonateState`` filters
      other than ``True`` need ``"arrays"``).
    - ``warn_retraces``: on this many traces of ``fun`` (default 10) whose arguments
      differ, warn once with a ``RetraceWarning`` naming the argument that keeps changing
      (a Python number passed each call, a new shape each call); ``None``: never warn.
    - ``**jit_kwargs``: passed to ``jax.jit`` (with ``trace="arrays"``,
      ``in_shardings``/``out_shardings`` over the flat list of traced arrays is not
      supported; shard the arrays themselves with ``jax.device_put`` instead: ``jit``
      follows their shardings).

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> @pm.jit
    ... def scale(x, factor, name="scaled"):
    ...     return {name: x * factor}
    >>> scale(jnp.ones(2), 3.0)
    {'scaled': Array([3., 3.], dtype=float32)}
    """
    donate = _check_donate(() if donate_argnums is None else donate_argnums)
    if trace not in ("arrays", "all"):
        raise TransformError(f'jit: trace must be "arrays" or "all", got {trace!r}.')
    for bad in ("static_argnums", "static_argnames", "donate_argnames"):
        if bad in jit_kwargs and trace == "arrays":
            raise TransformError(
                f"jit does not take {bad}: non-array arguments are already static, and "
                "arrays are donated with donate_argnums=(DonateState(argnum, filter),). "
                'To follow jax.jit\'s rule instead, pass trace="all".'
            )
    if warn_retraces is not None and warn_retraces < 2:
        raise TransformError(
            f"jit: warn_retraces must be None or an int >= 2, got {warn_retraces!r}."
        )

    def wrap(f: Callable[P, R]) -> Callable[P, R]:
        require_callable(f, "jit (filter_jit)")
        if trace == "all":
            given = None if donate_argnums is None else donate
            return _jax_rule(f, given, jit_kwargs, warn_retraces)
        return _JitWrapper(f, donate, jit_kwargs, warn_retraces).make_call()

    return wrap if fun is None else wrap(fun)


def _check_donate(donate_argnums: Any) -> tuple[int | DonateState, ...]:
    """``donate_argnums`` as a tuple, or a ``TypeError`` naming it."""
    if isinstance(donate_argnums, (int, DonateState)):
        entries: tuple[Any, ...] = (donate_argnums,)
    elif isinstance(donate_argnums, (tuple, list)):
        entries = tuple(donate_argnums)
    else:
        entries = ("not a sequence",)  # a str or a set: rejected below
    for d in entries:
        argnum = d.argnum if isinstance(d, DonateState) else d
        if isinstance(argnum, bool) or not isinstance(argnum, int):
            raise TypeError(
                "jit: donate_argnums must be an int, a DonateState(argnum, filter) or a "
                f"tuple of them, got {donate_argnums!r}; e.g. donate_argnums=0 or "
                "donate_argnums=(DonateState(0, 'params'),)."
            )
    return entries


def _jax_rule(
    fun: Callable[..., Any],
    donate: tuple[int | DonateState, ...] | None,
    jit_kwargs: dict[str, Any],
    warn_retraces: int | None,
) -> Any:
    """``jit(fun, trace="all")``: ``jax.jit`` over the argument trees, each trace noted
    for the retrace warning. A ``fun`` that is itself a tree (a Module, a bound method)
    is passed as a leading argument, so that its arrays are traced, not baked in."""
    positions: list[int] = []
    for d in donate or ():
        if isinstance(d, DonateState):
            if d.filter is not True:
                raise TransformError(
                    f'jit(trace="all"): DonateState({d.argnum}, {d.filter!r}) donates part '
                    "of an argument, which needs the flat list of arrays of "
                    'trace="arrays"; donate the whole argument (donate_argnums='
                    f'{d.argnum}) or drop trace="all".'
                )
            positions.append(d.argnum)
        else:
            positions.append(d)
    traces = TraceLog(fun, warn_retraces)
    if jtu.treedef_is_leaf(jtu.tree_structure(fun)):

        def traced(*args: Any, **kwargs: Any) -> Any:
            traces.note(None, args, kwargs)
            return fun(*args, **kwargs)

        functools.update_wrapper(traced, fun)
        # None (not given) lets jax.jit complete donate_argnums from donate_argnames
        nums = None if donate is None else tuple(positions)
        return jax.jit(traced, donate_argnums=nums, **jit_kwargs)

    def traced_tree(f: Any, *args: Any, **kwargs: Any) -> Any:
        traces.note(f, args, kwargs)
        return f(*args, **kwargs)

    options = dict(jit_kwargs)
    nums = options.get("static_argnums")
    if nums is not None:
        nums = (nums,) if isinstance(nums, int) else tuple(nums)
        options["static_argnums"] = tuple(i + 1 if i >= 0 else i for i in nums)
    shardings = options.get("in_shardings")
    if isinstance(shardings, (tuple, list)):
        options["in_shardings"] = (None, *shardings)
    shifted = None if donate is None else tuple(i + 1 for i in positions if i >= 0)
    jitted = jax.jit(traced_tree, donate_argnums=shifted, **options)

    @functools.wraps(fun)  # type: ignore[arg-type]
    def call(*args: Any, **kwargs: Any) -> Any:
        return jitted(fun, *args, **kwargs)

    call.lower = lambda *a, **k: jitted.lower(fun, *a, **k)  # type: ignore[attr-defined]
    call.trace = lambda *a, **k: jitted.trace(fun, *a, **k)  # type: ignore[attr-defined]
    call.eval_shape = lambda *a, **k: jitted.eval_shape(fun, *a, **k)  # type: ignore[attr-defined]
    call.clear_cache = jitted.clear_cache  # type: ignore[attr-defined]
    return call


filter_jit = jit
