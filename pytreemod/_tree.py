"""Tree helpers: array predicates, path keys and formatting, ``tree_at``, ``tree_equal``."""

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import jax
import jax.core
import jax.tree_util as jtu
import numpy as np

from ._errors import TreeAtError

T = TypeVar("T")
Key = Hashable
Path = tuple[Key, ...]

_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)


def is_array(x: Any) -> bool:
    """Whether ``x`` is an array: a ``jax.Array`` (tracers included) or a NumPy array/scalar.

    Python scalars are not arrays: filtered transforms treat them as static configuration,
    as Equinox does.

    >>> import jax.numpy as jnp
    >>> is_array(jnp.ones(3)), is_array(1.0)
    (True, False)
    """
    return isinstance(x, _ARRAY_TYPES)


def is_inexact_array(x: Any) -> bool:
    """Whether ``x`` is a floating-point or complex array (what ``grad`` differentiates)."""
    return is_array(x) and jax.numpy.issubdtype(x.dtype, jax.numpy.inexact)


def key_of(entry: Any) -> Key:
    """The plain key (str or int) of one JAX key-path entry."""
    if isinstance(entry, jtu.GetAttrKey):
        return entry.name
    if isinstance(entry, jtu.DictKey):
        return entry.key
    if isinstance(entry, jtu.SequenceKey):
        return entry.idx
    if isinstance(entry, jtu.FlattenedIndexKey):
        return entry.key
    return entry


def path_keys(keypath: Sequence[Any]) -> Path:
    """Convert a JAX key path to a tuple of plain keys: ``('blocks', 3, 'weight')``."""
    return tuple(key_of(e) for e in keypath)


def format_path(path: Sequence[Any]) -> str:
    """Render a path as Python attribute/index syntax: ``.blocks[3].mlp.weight``.

    Accepts plain keys or JAX key-path entries. The empty path renders as ``<root>``.
    """
    parts = []
    for entry in path:
        key = key_of(entry)
        if isinstance(key, str) and key.isidentifier():
            parts.append(f".{key}")
        elif isinstance(key, int):
            parts.append(f"[{key}]")
        else:
            parts.append(f"[{key!r}]")
    return "".join(parts) or "<root>"


def flatten_one_level(
    node: Any, is_leaf: Callable[[Any], bool] | None = None
) -> tuple[list[tuple[Any, Any]], Any] | None:
    """Split ``node`` into ``[(key_entry, child), ...]`` and a treedef, or ``None`` for a leaf."""
    if is_leaf is not None and is_leaf(node):
        return None
    children, treedef = jtu.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    if jtu.treedef_is_leaf(treedef):
        return None
    return [(kp[0], child) for kp, child in children], treedef


class _Marker:
    __slots__ = ("path",)

    def __init__(self, path: tuple[Any, ...]):
        self.path = path


_MISSING = object()


def tree_at(
    where: Callable[[T], Any],
    pytree: T,
    replace: Any = _MISSING,
    *,
    replace_fn: Callable[[Any], Any] | Any = _MISSING,
    is_leaf: Callable[[Any], bool] | None = None,
) -> T:
    """Return a copy of ``pytree`` with the node(s) picked out by ``where`` replaced.

    The functional update for immutable models, as in Equinox: ``where`` indexes into its
    argument (``lambda m: m.blocks[3].mlp.weight``) and may return one node or a tuple of
    nodes; ``replace`` gives the new value(s), or ``replace_fn`` maps the old to the new.

    A selected ``Variable`` (``Param``...) or axis-metadata box (``Partitioned``) given a
    replacement that is not one keeps its wrapper, with the new value inside:
    ``tree_at(lambda m: m.kernel, model, w)`` puts ``w`` in the kernel's ``Param``, so
    the model keeps its structure (collections, sharding names). Replace it with another
    Variable to change the collection, or select ``m.kernel.value`` to reach inside.

    **Arguments:**

    - ``where``: ``pytree -> node`` or ``pytree -> tuple[node, ...]``; it must only select.
    - ``pytree``: any PyTree, typically a Module.
    - ``replace``: the new node, or a sequence of them (one per selected node).
    - ``replace_fn``: alternative to ``replace``: ``old_node -> new_node``.
    - ``is_leaf``: treat matching nodes as leaves when walking the tree.

    **Returns:** a new tree; the input is unchanged.

    >>> import jax.numpy as jnp
    >>> tree = {"a": jnp.zeros(2), "b": (1, 2)}
    >>> tree_at(lambda t: t["b"][1], tree, 5)["b"]
    (1, 5)
    """
    if not callable(where):
        raise TreeAtError(
            f"tree_at: `where` must be a function selecting the node(s) to replace, e.g. "
            f"`lambda m: m.kernel`, got {where!r} of type {type(where).__name__}."
        )
    if (replace is _MISSING) == (replace_fn is _MISSING):
        raise TreeAtError(
            "tree_at needs exactly one of `replace` or `replace_fn`: pass the new value as "
            "`replace=...`, or a function old -> new as `replace_fn=...`."
        )
    marked = jtu.tree_map_with_path(lambda kp, _: _Marker(tuple(kp)), pytree, is_leaf=is_leaf)
    index: dict[int, list[tuple[Any, ...]]] = {}
    _index_nodes(marked, (), index, is_leaf)
    try:
        selected = where(marked)
    except TypeError as err:
        if "_Marker" not in str(err):
            raise
        raise TreeAtError(
            f"`where` computed with a leaf of the tree ({err}). `where` must only index into "
            "its argument, e.g. `lambda m: m.layers[0].weight`; put computed values in "
            "`replace` or `replace_fn` instead."
        ) from None
    if _node_paths(selected, index) is not None:
        nodes, single = [selected], True
    elif isinstance(selected, (tuple, list)):
        nodes, single = list(selected), False
    else:
        nodes, single = [selected], True
    targets: list[tuple[Any, ...]] = []
    for node in nodes:
        paths = _node_paths(node, index)
        if paths is None:
            raise TreeAtError(
                f"`where` returned {type(node).__name__} object that is not a node of the "
                "tree. `where` must only index into its argument, e.g. "
                "`lambda m: m.layers[0].weight`, not compute new values."
            )
        if len(paths) > 1:
            where_list = ", ".join(format_path(p) for p in paths)
            raise TreeAtError(
                f"`where` does not uniquely identify a single element of the tree: the "
                f"selected {node!r} occurs at {where_list}. This usually occurs when trying "
                "to replace a `None` value or an empty tuple; use `Module.replace` on the "
                "parent, or store a sentinel value instead."
            )
        if paths[0] in targets:
            raise TreeAtError(
                f"`where` selected {format_path(paths[0])} more than once; select each node "
                "once (the replacements would conflict)."
            )
        targets.append(paths[0])
    if replace_fn is not _MISSING:
        fns: list[Callable[[Any], Any]] = [replace_fn] * len(targets)
    else:
        values = [replace] if single else list(replace)
        if len(values) != len(targets):
            raise TreeAtError(
                f"`where` selected {len(targets)} nodes but `replace` has {len(values)} "
                "values; pass one replacement per selected node (as a tuple)."
            )
        fns = [lambda _, v=v: v for v in values]
    repl = {t: _keeping_boxes(fn) for t, fn in zip(targets, fns)}
    prefixes = {t[:i] for t in targets for i in range(len(t))}
    return _rebuild(pytree, (), repl, prefixes, is_leaf)


def _is_variable(x: Any) -> bool:
    # A pytreemod Variable, recognised by its class flag (``_variables`` sits above).
    return getattr(type(x), "_pytreemod_variable", False) is True


def _is_box(x: Any) -> bool:
    # An AxisMetadata box (``Partitioned``...), recognised by its ``replace_boxed``.
    return callable(getattr(type(x), "replace_boxed", None))


def _keeping_boxes(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` (old node -> new node), except that a Variable or an axis-metadata box
    replaced by a value that is not one keeps its wrapper: the value goes inside it
    (``Param(w)`` replaced by ``a`` gives ``Param(a)``; ``Param(Partitioned(w, names))``
    gives ``Param(Partitioned(a, names))``). The tree's structure never changes
    silently; to change the wrapper, replace it with another Variable or box."""

    def replace(old: Any) -> Any:
        new = fn(old)
        if _is_variable(old) and not _is_variable(new):
            inner = old.value
            if _is_box(inner) and not _is_box(new):
                return old.replace(inner.replace_boxed(new))
            return old.replace(new)
        if _is_box(old) and not _is_box(new) and not _is_variable(new):
            return old.replace_boxed(new)
        return new

    return replace


def _index_nodes(node: Any, path: tuple[Any, ...], index: dict, is_leaf: Any) -> None:
    index.setdefault(id(node), []).append(path)
    if isinstance(node, _Marker):
        return
    split = flatten_one_level(node, is_leaf)
    if split is None:
        return
    for key, child in split[0]:
        _index_nodes(child, (*path, key), index, is_leaf)


def _node_paths(node: Any, index: dict) -> list[tuple[Any, ...]] | None:
    if isinstance(node, _Marker):
        return [node.path]
    return index.get(id(node))


def _rebuild(node: Any, path: tuple, repl: dict, prefixes: set, is_leaf: Any) -> Any:
    if path in repl:
        return repl[path](node)
    if path not in prefixes:
        return node
    split = flatten_one_level(node, is_leaf)
    assert split is not None
    children, treedef = split
    new = [_rebuild(child, (*path, key), repl, prefixes, is_leaf) for key, child in children]
    return jtu.tree_unflatten(treedef, new)


def tree_equal(a: Any, b: Any) -> bool:
    """Whether two PyTrees have the same structure and equal leaves.

    Arrays compare by shape, dtype and values (tracers only by identity, since their values
    are unknown); other leaves with ``==``. Returns a Python bool.
    """
    leaves_a, tree_a = jtu.tree_flatten(a)
    leaves_b, tree_b = jtu.tree_flatten(b)
    if tree_a != tree_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        if x is y:
            continue
        if is_array(x) or is_array(y):
            if not (is_array(x) and is_array(y)):
                return False
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if isinstance(x, jax.core.Tracer) or isinstance(y, jax.core.Tracer):
                return False
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                x, y = jax.random.key_data(x), jax.random.key_data(y)
            if not np.array_equal(np.asarray(x), np.asarray(y), equal_nan=_inexact(x)):
                return False
        elif not bool(x == y):
            return False
    return True


def _inexact(x: Any) -> bool:
    return bool(np.issubdtype(x.dtype, np.inexact))


def apply_updates(model: T, updates: Any) -> T:
    """``model`` with ``updates`` added to its arrays: optax's ``apply_updates``, typed
    to return the model's own type (optax's returns an ``ArrayTree``, which a type
    checker cannot call as a model).

    ``updates`` has the model's structure (what ``optimizer.update`` returns for the
    gradients of a model) or a prefix of it where a ``None`` leaves that part unchanged,
    as in ``eqx.apply_updates``. Each result keeps its parameter's dtype (a bfloat16
    parameter stays bfloat16), as optax does.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> w = {"w": pm.Param(jnp.ones(2)), "frozen": pm.Param(jnp.zeros(2))}
    >>> apply_updates(w, {"w": pm.Param(jnp.full(2, 0.5)), "frozen": None})["w"].value
    Array([1.5, 1.5], dtype=float32)
    """

    def add(update: Any, value: Any) -> Any:
        if update is None or value is None:
            return value
        return jax.numpy.asarray(value + update).astype(jax.numpy.result_type(value))

    return jtu.tree_map(add, updates, model, is_leaf=lambda x: x is None)
