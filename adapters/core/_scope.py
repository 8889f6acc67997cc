"""``Scope``: a cursor into a variables dict plus named rng streams.

A scope function is a plain function whose first argument is a ``Scope``; it creates and
reads variables (``param``, ``variable``), draws keys (``make_rng``) and calls children
(``child``). ``init``/``apply`` (``_apply.py``) run it on a root scope and return the
variables that changed. Invariants:

- The variables live in the root scope's ``{collection: nested dict}``; a child scope
  holds references to its sub-dicts, created on first write. Writes are allowed only in
  mutable collections (the ``mutable=`` filter of ``apply``/``init``).
- Every name in a scope is reserved once: a child and a variable may not share a name; two
  variables may, if their collections differ.
- Rng streams are derived deterministically from the root key, the path of the scope and
  a per-scope counter: ``make_rng(name)`` folds one hash of ``(path..., counter)`` into the
  stream's key, so the same program and keys give the same variables.
- A scope handed out by ``apply`` or a lifted transform is invalidated when that call
  returns; using it afterwards is an ``InvalidScopeError``.
"""

import collections
import contextlib
import functools
import hashlib
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Literal, TypeVar, cast, overload

import jax
import numpy as np

import pytreemod as pm

from .. import config as _config
from . import _filters, meta
from ._errors import (
    InvalidRngError,
    InvalidScopeError,
    ModifyScopeVariableError,
    ScopeCollectionNotFound,
    ScopeNameInUseError,
    ScopeParamNotFoundError,
    ScopeParamShapeError,
    ScopeVariableNotFoundError,
    UnliftedCollectionError,
    UnliftedRngError,
)
from ._frozen_dict import FrozenDict

T = TypeVar("T")

DenyList = _filters.DenyList

_EMPTY: FrozenDict[str, Any] = FrozenDict()


# ----------------------------------------------------------------------------- rngs


def _hash32(parts: tuple[Any, ...]) -> int:
    """Flax's static-data hash: the first 4 bytes of SHA-1 over the parts (strings as
    UTF-8, ints as minimal big-endian bytes), each preceded by a NUL byte when the
    ``flax_fix_rng_separator`` flag is set. Keys therefore equal Flax's. A Python int
    (below 2**32) folds in as the same uint32 and traces faster than a NumPy scalar."""
    separate = _config.flax_fix_rng_separator
    m = hashlib.sha1()
    for part in parts:
        if separate:
            m.update(b"\x00")
        if isinstance(part, str):
            m.update(part.encode("utf-8"))
        elif isinstance(part, int):
            m.update(part.to_bytes((part.bit_length() + 7) // 8, byteorder="big"))
        else:
            raise ValueError(f"Expected int or string, got: {part}")
    return int.from_bytes(m.digest()[:4], "big")


class LazyRng:
    """A stream's root key plus the path below it, folded in only when a key is drawn."""

    __slots__ = ("rng", "suffix")

    def __init__(self, rng: Any, suffix: tuple[Any, ...] = ()):
        self.rng: Any = rng
        self.suffix: tuple[Any, ...] = suffix

    @staticmethod
    def create(rng: "LazyRng | jax.Array", *suffix: Any) -> "LazyRng":
        """A LazyRng for ``rng`` (a key, or a LazyRng to extend) with ``suffix`` appended."""
        if isinstance(rng, LazyRng):
            return LazyRng(rng.rng, rng.suffix + suffix)
        return LazyRng(rng, suffix)

    def clear_suffix(self) -> "LazyRng":
        """The same root key without the suffix."""
        return LazyRng(self.rng, ())

    def __repr__(self) -> str:
        return f"LazyRng(rng={self.rng!r}, suffix={self.suffix!r})"

    def as_jax_rng(self) -> jax.Array:
        """The key: ``fold_in(rng, hash(suffix))`` (the rng itself when there is no suffix)."""
        if not self.suffix:
            return self.rng
        return jax.random.fold_in(self.rng, _hash32(self.suffix))


jax.tree_util.register_pytree_with_keys(
    LazyRng,
    lambda r: (((jax.tree_util.GetAttrKey("rng"), r.rng),), r.suffix),
    lambda suffix, children: LazyRng(next(iter(children)), suffix),
)


# ----------------------------------------------------------------------------- lifting


class LiftInfo:
    """What a lifted transform made (un)available to the scopes inside it.

    Set by ``pack`` on the scopes it reconstructs and inherited by their children, so an
    error inside a transform can say that a collection or stream was not lifted.
    """

    __slots__ = ("hidden_rngs", "parent", "transform", "variables")

    def __init__(
        self,
        transform: str,
        variables: pm.Filter,
        hidden_rngs: frozenset[str],
        parent: "LiftInfo | None",
    ):
        self.transform = transform
        self.variables = variables
        self.hidden_rngs = hidden_rngs
        self.parent = parent

    def unlifted_collection(self, col: str) -> str | None:
        """The innermost transform that did not lift collection ``col``, if any."""
        info: LiftInfo | None = self
        while info is not None:
            if not _filters.in_filter(info.variables, col):
                return info.transform
            info = info.parent
        return None

    def unlifted_rng(self, name: str) -> str | None:
        """The innermost transform that hid the existing rng stream ``name``, if any."""
        info: LiftInfo | None = self
        while info is not None:
            if name in info.hidden_rngs:
                return info.transform
            info = info.parent
        return None

    def key(self) -> tuple[Any, ...]:
        """A hashable summary (for compilation caches)."""
        return (
            self.transform,
            self.variables,
            self.hidden_rngs,
            self.parent.key() if self.parent else None,
        )


# ----------------------------------------------------------------------------- variables


class Variable(Generic[T]):
    """A reference to one variable of a scope: read and write it through ``.value``.

    Returned by ``Scope.variable``. With ``unbox=True`` (the default), ``.value`` strips
    axis-metadata boxes, and assigning a plain value to a boxed variable keeps the box
    (its metadata) around the new value.
    """

    __slots__ = ("collection", "name", "scope", "unbox")

    def __init__(self, scope: "Scope", collection: str, name: str, unbox: bool = True):
        self.scope: Scope = scope
        self.collection: str = collection
        self.name: str = name
        self.unbox: bool = unbox

    @property
    def value(self) -> T:
        """The current value (unboxed if ``unbox``)."""
        v = self.scope.get_variable(self.collection, self.name, unbox=False)
        return _unbox(v) if self.unbox else v

    @value.setter
    def value(self, value: T) -> None:
        if self.unbox:
            current = self.scope.get_variable(self.collection, self.name, unbox=False)
            value = _rebox(current, value)
        self.scope.put_variable(self.collection, self.name, value)

    def is_mutable(self) -> bool:
        """Whether the variable's collection is mutable in its scope."""
        return self.scope.is_mutable_collection(self.collection)

    def __repr__(self) -> str:
        return (
            f"Variable(collection={self.collection!r}, name={self.name!r}, "
            f"scope={self.scope.path_text!r})"
        )


def _unbox(value: Any) -> Any:
    if isinstance(value, jax.Array):
        return value
    return meta.unbox(value)


def _rebox(current: Any, value: Any) -> Any:
    """``value`` put into the boxes of ``current`` (``meta.replace_boxed``) where the two
    trees agree, with boxes as leaves, and ``current`` holds a box; else ``value``."""
    if isinstance(current, jax.Array) or current is None:
        return value
    cur_def = jax.tree.structure(current, is_leaf=pm.is_box)
    if cur_def != jax.tree.structure(value, is_leaf=pm.is_box):
        return value
    if not any(pm.is_box(x) for x in cur_def.flatten_up_to(current)):
        return value
    return meta.replace_boxed(current, value)


# Shapes an initializer produces, per init_fn (weakly: a closure that dies takes its
# entries with it) and per hashable (args, kwargs): the parameter shape check then costs a
# dict lookup instead of a jax.eval_shape per read.
_INIT_SHAPES: "weakref.WeakKeyDictionary[Any, dict[Any, list[tuple[int, ...]]]]" = (
    weakref.WeakKeyDictionary()
)


def _hashable(x: Any) -> Any:
    """``x`` with lists turned into tagged tuples, so that shape arguments given as lists
    (``[features]``, as Linen's norms pass them) can key the shape cache."""
    if isinstance(x, list):
        return (list, tuple(_hashable(v) for v in x))
    if type(x) is tuple:
        return tuple(_hashable(v) for v in x)
    return x


# Initializers from these modules are pure functions of (key, shape, dtype): under a trace,
# one trace per distinct shape is reused (``pm.trace_once``). Others (user closures, which
# may read or write module state) run as given.
_PURE_INITIALIZER_MODULES = frozenset({"jax.nn.initializers", "jax._src.nn.initializers"})
_TRACED_INITS: "weakref.WeakKeyDictionary[Any, Callable[..., Any]]" = weakref.WeakKeyDictionary()


def _traced_init(init_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``init_fn`` itself, or for a pure ``jax.nn`` initializer its ``pm.trace_once``."""
    if getattr(init_fn, "__module__", None) not in _PURE_INITIALIZER_MODULES:
        return init_fn
    traced = _TRACED_INITS.get(init_fn)
    if traced is None:
        traced = _TRACED_INITS[init_fn] = pm.trace_once(init_fn)
    return traced


def _init_shapes(
    init_fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[int, ...]]:
    per_fn: dict[Any, list[tuple[int, ...]]] | None
    key: Any = (_hashable(args), _hashable(tuple(sorted(kwargs.items()))) if kwargs else ())
    try:
        per_fn = _INIT_SHAPES.get(init_fn)
        hit = per_fn.get(key) if per_fn is not None else None
    except TypeError:  # not weakly referenceable, or unhashable arguments
        per_fn, hit, key = None, None, None
    if hit is not None:
        return hit
    abstract = jax.eval_shape(lambda: init_fn(jax.random.key(0), *args, **kwargs))
    shapes = [tuple(x.shape) for x in jax.tree.leaves(abstract)]
    if key is not None:
        try:
            if per_fn is None:
                per_fn = _INIT_SHAPES.setdefault(init_fn, {})
            if len(per_fn) < 256:
                per_fn[key] = shapes
        except TypeError:
            pass
    return shapes


def _put_variable(target: dict[str, Any], key: str, value: Any) -> None:
    """Write ``value`` at ``key``, merging into an existing dict so that child scopes'
    references to its sub-dicts stay valid."""
    current = target.get(key)
    if isinstance(current, dict) and isinstance(value, Mapping):
        for k, v in value.items():
            _put_variable(current, k, v)
    else:
        target[key] = value


class _ChildToken:
    def __repr__(self) -> str:
        return "<child>"


_CHILD = _ChildToken()


# ----------------------------------------------------------------------------- Scope


class Scope:
    """Variables and rng streams of one layer, and the factory of its children.

    Scope functions receive one from ``init``/``apply`` (or ``bind``); they rarely build
    it themselves. See the module docstring for the invariants.

    **Arguments:**

    - ``variables``: ``{collection: nested dict}`` (mutable collections are written in place).
    - ``rngs``: ``{stream: key}``.
    - ``name``: the name of this scope in its parent (``None`` for a root).
    - ``mutable``: collection filter of the collections that may be written.
    - ``parent``: the parent scope, for children.
    - ``path``: names from the root to this scope; ``debug_path`` is the same with the
      lifted transforms it crossed (``vmap(mlp)``), used in messages.
    - ``flags``: read-only configuration (``init`` sets ``initializing``).
    """

    reservations: dict[str, set[str | None]]

    def __init__(
        self,
        variables: dict[str, Any],
        rngs: Mapping[str, Any] | None = None,
        name: str | None = None,
        mutable: _filters.CollectionFilter = False,
        parent: "Scope | None" = None,
        path: tuple[str, ...] | list[str] = (),
        debug_path: tuple[str, ...] | list[str] = (),
        flags: Mapping[str, Any] | None = None,
    ):
        self._variables = variables
        self.parent = parent
        self.name = name
        self.path: tuple[str, ...] = tuple(path)
        self.debug_path: tuple[str, ...] = tuple(debug_path) or self.path
        self.rngs: dict[str, LazyRng] = (
            {k: LazyRng.create(v) for k, v in rngs.items()} if rngs else {}
        )
        self.mutable: pm.Filter = _filters.to_filter(mutable)
        self.flags: Mapping[str, Any] = (
            flags if isinstance(flags, FrozenDict) else FrozenDict(flags or {})
        )
        self._root = parent.root if parent is not None else None
        self.rng_counters: dict[Any, Any] = {key: 0 for key in self.rngs}
        self.reservations = collections.defaultdict(set)
        self._invalid = False
        self._mutable_cache: dict[str, bool] = (
            parent._mutable_cache if parent is not None and parent.mutable == self.mutable else {}
        )
        self._lift: LiftInfo | None = parent._lift if parent is not None else None

    # -- identity

    def __eq__(self, other: object) -> bool:
        # A scope is a cursor: same root variables, path and rng counters behave alike.
        if not isinstance(other, Scope):
            return False
        if self is other:
            return True
        return (
            self.root._variables is other.root._variables
            and self.path == other.path
            and self.rng_counters is other.rng_counters
        )

    def __hash__(self) -> int:
        return hash((id(self.root._variables), self.path, id(self.rng_counters)))

    def __repr__(self) -> str:
        return f"Scope({self.path_text!r})"

    @property
    def root(self) -> "Scope":
        """The root scope (the one holding the variables dict)."""
        return self._root or self

    @property
    def path_text(self) -> str:
        """The debug path as text: ``/vmap(mlp)/dense_0``."""
        return "/" + "/".join(self.debug_path)

    # -- validity

    @property
    def invalid(self) -> bool:
        """Whether this scope was invalidated (its ``apply`` or transform returned)."""
        return self._invalid or (self._root is not None and self._root._invalid)

    def _check_valid(self) -> None:
        if self.invalid:
            raise InvalidScopeError(self.path_text)

    def invalidate(self) -> None:
        """Invalidate the scope: any later write, rng draw or child creation is an error."""
        self._invalid = True

    @contextlib.contextmanager
    def temporary(self) -> Iterator["Scope"]:
        """A context manager that invalidates the scope on exit."""
        try:
            yield self
        finally:
            self.invalidate()

    def rewound(self, rewind_rngs: bool = False) -> "Scope":
        """A copy with no names reserved, sharing the variables (and, unless
        ``rewind_rngs``, the rng counters): call a function again on the same state."""
        self._check_valid()
        scope = Scope(
            self._variables,
            None,
            self.name,
            self.mutable,
            self.parent,
            path=self.path,
            debug_path=self.debug_path,
            flags=self.flags,
        )
        scope.rngs = self.rngs
        scope._lift = self._lift
        scope._mutable_cache = self._mutable_cache
        scope.rng_counters = {key: 0 for key in self.rngs} if rewind_rngs else self.rng_counters
        return scope

    # -- names

    def name_reserved(self, name: str, col: str | None = None) -> bool:
        """Whether ``name`` is taken (for a variable of collection ``col``, or a child)."""
        taken = self.reservations.get(name)
        if not taken:
            return False
        return None in taken or col is None or col in taken

    def reserve(self, name: str, col: str | None = None) -> None:
        """Reserve ``name`` for a child (``col=None``) or a variable of collection ``col``."""
        if not isinstance(name, str):
            raise TypeError(
                f"The name of a child scope or variable must be a string, got "
                f"{type(name).__name__} {name!r} in scope {self.path_text!r}."
            )
        if self.name_reserved(name, col):
            raise ScopeNameInUseError(name, self.path_text, col)
        self.reservations[name].add(col)

    def default_name(self, prefix: str) -> str:
        """The first unreserved name ``prefix0``, ``prefix1``, ..."""
        i = 0
        while True:
            name = f"{prefix}{i}"
            if name not in self.reservations:
                return name
            i += 1

    # -- children

    def push(self, name: str | None = None, prefix: str = "", reuse: bool = False) -> "Scope":
        """Create a child scope (named ``name``, or ``default_name(prefix)``).

        With ``reuse=True`` an existing child name is not an error: the child continues
        where the previous one with that name left its rng counters.
        """
        self._check_valid()
        if name is None:
            name = self.default_name(prefix)
        if not reuse or name not in self.reservations:
            self.reserve(name)
        child = Scope.__new__(Scope)
        child._variables = {}
        child.parent = self
        child.name = name
        child.path = (*self.path, name)
        child.debug_path = (*self.debug_path, name)
        child.rngs = {k: LazyRng(r.rng, (*r.suffix, name)) for k, r in self.rngs.items()}
        child.mutable = self.mutable
        child.flags = self.flags
        child._root = self.root
        rng_key = (_CHILD, name)
        counters = self.rng_counters.get(rng_key)
        if counters is None:
            counters = {key: 0 for key in child.rngs}
            self.rng_counters[rng_key] = counters
        child.rng_counters = counters
        child.reservations = collections.defaultdict(set)
        child._invalid = False
        child._mutable_cache = self._mutable_cache
        child._lift = self._lift
        return child

    def child(
        self,
        fn: Callable[..., T],
        name: str | None = None,
        prefix: str | None = None,
        named_call: bool = True,
        **partial_kwargs: Any,
    ) -> Callable[..., T]:
        """``fn`` with a child scope partially applied.

        Calling the result several times reuses the child's variables. The child is
        named ``name``, or ``default_name(prefix)`` with ``prefix`` defaulting to
        ``fn.__name__ + '_'`` (``dense_0``, ``dense_1``...). With ``named_call`` the call
        runs under ``jax.named_scope(name)`` for profiles.
        """
        if name is None:
            if prefix is None:
                fn_name = getattr(fn, "__name__", None)
                prefix = f"{fn_name}_" if fn_name else ""
            name = self.default_name(prefix)
        scope = self.push(name)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            kw = {**partial_kwargs, **kwargs} if partial_kwargs else kwargs
            if named_call:
                with jax.named_scope(name):
                    return fn(scope.rewound(), *args, **kw)
            return fn(scope.rewound(), *args, **kw)

        return wrapper

    # -- collections

    def is_mutable_collection(self, col: str) -> bool:
        """Whether collection ``col`` may be written in this scope."""
        cache = self._mutable_cache
        hit = cache.get(col)
        if hit is None:
            hit = cache[col] = _filters.in_filter(self.mutable, col)
        return hit

    def is_collection_empty(self, col: str) -> bool:
        """Whether collection ``col`` is absent or empty in the whole variables dict."""
        return not self.root._variables.get(col)

    def _collection(self, col: str) -> Mapping[str, Any]:
        variables = self._variables
        found = variables.get(col)
        if found is not None:
            return found
        parent = self.parent
        if parent is None:
            return _EMPTY
        parent_col = parent._collection(col)
        mine = parent_col.get(self.name)  # type: ignore[arg-type]
        if mine is None:
            return _EMPTY
        variables[col] = mine
        return mine

    def _mutable_collection(self, col: str) -> dict[str, Any]:
        variables = self._variables
        found = variables.get(col)
        if found is not None and isinstance(found, dict):
            return found
        if self.parent is None:
            new: dict[str, Any] = dict(found) if found is not None else {}
            variables[col] = new
            return new
        parent_col = self.parent._mutable_collection(col)
        name = cast(str, self.name)
        mine = parent_col.get(name)
        if not isinstance(mine, dict):
            mine = parent_col[name] = dict(mine) if isinstance(mine, Mapping) else {}
        variables[col] = mine
        return mine

    def _populate_collections(self) -> None:
        for col in self.root._variables:
            self._collection(col)

    def variables(self) -> dict[str, Any]:
        """The variables of this scope, ``{collection: nested dict}`` (do not mutate)."""
        self._populate_collections()
        return {col: v for col, v in self._variables.items() if v}

    def mutable_variables(self) -> dict[str, Any]:
        """The variables of this scope's mutable collections."""
        self._populate_collections()
        return {col: v for col, v in self._variables.items() if self.is_mutable_collection(col)}

    # -- rngs

    def has_rng(self, name: str) -> bool:
        """Whether an rng stream ``name`` is available."""
        return name in self.rngs

    def make_rng(self, name: str = "params") -> jax.Array:
        """A new key from stream ``name``: a fold of the path and this scope's counter.

        As in Flax, a missing stream falls back to ``params`` when that one exists.
        """
        if name not in self.rngs:
            transform = self._lift.unlifted_rng(name) if self._lift else None
            if transform is not None:
                raise UnliftedRngError(
                    f'{self.name} needs PRNG for "{name}". The rng stream "{name}" is not '
                    f'lifted into the transform "{transform}": add it to its rng filters, '
                    f"e.g. split_rngs={{'{name}': True}} or rngs=['{name}']."
                )
            if "params" not in self.rngs:
                raise InvalidRngError(f'{self.name} needs PRNG for "{name}"')
            name = "params"
        self._check_valid()
        counter = self.rng_counters[name] + 1
        self.rng_counters[name] = counter
        rng = self.rngs[name]
        return jax.random.fold_in(rng.rng, _hash32((*rng.suffix, counter)))

    # -- variables

    def has_variable(self, col: str, name: str) -> bool:
        """Whether variable ``name`` exists in collection ``col`` of this scope."""
        return name in self._collection(col)

    def get_variable(self, col: str, name: str, default: Any = None, *, unbox: bool = False) -> Any:
        """The stored value of variable ``name`` in ``col``, or ``default`` if it does not
        exist. As in Flax, axis-metadata boxes are returned as stored; ``unbox=True``
        strips them (``param`` and ``Variable.value`` return unboxed values)."""
        variables = self._collection(col)
        if name in variables:
            value = variables[name]
            return _unbox(value) if unbox else value
        return default

    def put_variable(self, col: str, name: str, value: Any) -> None:
        """Write variable ``name`` of collection ``col`` (which must be mutable)."""
        self._check_valid()
        if not self.is_mutable_collection(col):
            transform = self._lift.unlifted_collection(col) if self._lift else None
            if transform is not None:
                raise ModifyScopeVariableError(
                    col,
                    name,
                    self.path_text,
                    hint=f' It is not lifted into the transform "{transform}": add it to the '
                    "transform's variable filters.",
                )
            typo = _filters.typo_hint(col, _filters.selected_names(self.mutable), "mutable= names")
            raise ModifyScopeVariableError(col, name, self.path_text, hint=typo)
        _put_variable(self._mutable_collection(col), name, value)

    def _missing(self, col: str, name: str, param: bool) -> Exception:
        transform = self._lift.unlifted_collection(col) if self._lift else None
        if transform is not None:
            return UnliftedCollectionError(col, name, self.path_text, transform)
        if self.is_collection_empty(col):
            have = (c for c, v in self.root._variables.items() if v)
            typo = _filters.typo_hint(col, have, "The variables have collection")
            return ScopeCollectionNotFound(col, name, self.path_text, hint=typo)
        if param:
            return ScopeParamNotFoundError(name, self.path_text)
        return ScopeVariableNotFoundError(name, col, self.path_text)

    @overload
    def variable(
        self,
        col: str,
        name: str,
        init_fn: Callable[..., pm.AxisMetadata],
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Variable[Any]: ...

    @overload
    def variable(
        self,
        col: str,
        name: str,
        init_fn: Callable[..., T] | None = None,
        *init_args: Any,
        unbox: Literal[True] = True,
        **init_kwargs: Any,
    ) -> Variable[T]: ...

    @overload
    def variable(
        self,
        col: str,
        name: str,
        init_fn: Callable[..., T] | None = None,
        *init_args: Any,
        unbox: Literal[False],
        **init_kwargs: Any,
    ) -> Variable[Any]: ...

    def variable(
        self,
        col: str,
        name: str,
        init_fn: Callable[..., T] | None = None,
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Variable[Any]:
        """The variable ``name`` of collection ``col``, created with
        ``init_fn(*init_args, **init_kwargs)`` if it does not exist (and ``col`` is
        mutable).

        Returns a ``Variable`` reference: read and write ``.value``.
        """
        self.reserve(name, col)
        if not self.has_variable(col, name):
            if init_fn is None or not self.is_mutable_collection(col):
                raise self._missing(col, name, param=False)
            self.put_variable(col, name, init_fn(*init_args, **init_kwargs))
        return Variable(self, col, name, unbox=unbox)

    @overload
    def param(
        self,
        name: str,
        init_fn: Callable[..., pm.AxisMetadata],
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Any: ...

    @overload
    def param(
        self,
        name: str,
        init_fn: Callable[..., T],
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> T: ...

    def param(
        self,
        name: str,
        init_fn: Callable[..., Any],
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Any:
        """The parameter ``name`` (collection ``params``), created with
        ``init_fn(self.make_rng('params'), *init_args, **init_kwargs)`` if it does not
        exist.

        An existing parameter is checked against the shape ``init_fn`` would produce
        (``ScopeParamShapeError``). With ``unbox`` (default) axis-metadata boxes are
        stripped from the returned value (the stored value keeps them).
        """
        self.reserve(name, "params")
        variables = self._collection("params")
        if name in variables:
            value = variables[name]
            if unbox:
                value = _unbox(value)
            shapes = _init_shapes(init_fn, init_args, init_kwargs)
            for leaf, shape in zip(jax.tree.leaves(value), shapes):
                if np.shape(leaf) != shape:
                    raise ScopeParamShapeError(name, self.path_text, np.shape(leaf), shape)
            return value
        if not self.is_mutable_collection("params"):
            raise self._missing("params", name, param=True)
        value = _traced_init(init_fn)(self.make_rng("params"), *init_args, **init_kwargs)
        self.put_variable("params", name, value)
        return _unbox(value) if unbox else value

    # -- flags

    def has_flag(self, key: str) -> bool:
        """Whether flag ``key`` is set."""
        return key in self.flags

    def get_flag(self, key: str, default: Any = ...) -> Any:
        """Flag ``key``; ``default`` if given and the flag is not set, else a KeyError."""
        if key in self.flags:
            return self.flags[key]
        if default is ...:
            raise KeyError(f"Flag {key!r} is not set on scope {self.path_text!r}.")
        return default
