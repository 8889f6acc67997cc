"""``pack``: the one primitive every lifted transform is built on (docs/design/lifting.md).

``pack(fn, in_variable_filters, out_variable_filters, rng_filters)`` returns a scope
function. Called with a scope (or a PyTree of scopes) it goes through six stages:

1. **Scope de-duplication**: only root scopes are lifted (a scope whose ancestor is also
   lifted is rebuilt later from that ancestor and its relative path).
2. **Filtering**: each root's collections are split into one group per input filter, a
   collection going to the first filter that matches it; each rng stream matched by an
   rng filter goes in as it is (a ``LazyRng``: the key plus the path folded in when a
   key is drawn). Unmatched collections and streams are not available inside (using one
   is an ``UnliftedCollectionError``/``UnliftedRngError``). As in Flax, the scopes
   inside share the rng counters of the scopes outside, so keys drawn inside a
   transform equal the keys drawn without it (split streams aside).
3. **Transform**: ``fn(scope_fn, repack_fn, variable_groups, rng_groups, *args)`` runs,
   typically passing the groups through a pytreemod transform.
4. **Scope reconstruction**: inside, ``scope_fn(variable_groups, rng_groups)`` rebuilds
   the scopes from the (transformed) groups.
5. **Repack**: ``repack_fn(scopes)`` collects the variables of the mutable collections
   into one group per output filter (immutable state is not returned) and invalidates
   the inner scopes.
6. **Commit**: the groups ``fn`` returns next to its output are written into the
   original scopes (into their mutable collections).

Groups are tuples with one entry per group; each entry is a tuple with one
``{collection: value}`` dict per lifted root scope.
"""

import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

import pytreemod as pm

from . import _filters
from ._errors import LiftError
from ._lift_util import as_arrays, is_scope
from ._scope import LiftInfo, Scope

VariableGroups = tuple[tuple[dict[str, Any], ...], ...]
RngGroups = tuple[tuple[dict[str, Any], ...], ...]


def _dedup_scopes(
    scopes: Sequence[Scope],
) -> tuple[tuple[Scope, ...], tuple[tuple[Scope, tuple[str, ...]], ...]]:
    """Stage 1: the root scopes, and for every scope its root and relative path."""
    roots: dict[Scope, None] = dict.fromkeys(scopes)
    paths = []
    for leaf in scopes:
        top, top_path = leaf, ()
        scope, path = leaf.parent, [leaf.name]
        while scope is not None:
            if scope in roots:
                top, top_path = scope, tuple(reversed(path))
            path.append(scope.name)
            scope = scope.parent
        if top is not leaf and leaf in roots:
            del roots[leaf]
        paths.append((top, top_path))
    return tuple(roots), tuple(paths)  # type: ignore[return-value]


def _transpose(xs: Sequence[Sequence[Any]]) -> tuple[tuple[Any, ...], ...]:
    return tuple(zip(*xs))


def _copy_dicts(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _copy_dicts(v) for k, v in x.items()}
    return x


class _Lifting:
    """One call of a lifted function: the root scopes and the filters, with stages 2, 4,
    5 and 6 of docs/design/lifting.md as methods (``groups``, ``scope_fn``, ``repack_fn``,
    ``publish``)."""

    def __init__(
        self,
        scope_tree: Any,
        in_variable_filters: Sequence[Any],
        out_variable_filters: Sequence[Any],
        rng_filters: Sequence[Any],
        name: str | None,
    ):
        self.in_filters = [_filters.to_filter(f) for f in in_variable_filters]
        self.out_filters = [_filters.to_filter(f) for f in out_variable_filters]
        self.rng_filters = [_filters.to_filter(f) for f in rng_filters]
        self.out_union = _filters.union(*self.out_filters) if self.out_filters else pm.Nothing()
        self.in_union = _filters.union(*self.in_filters) if self.in_filters else pm.Nothing()
        self.name = name
        self.transform = name or "pack"
        scopes, self.treedef = jax.tree.flatten(scope_tree, is_leaf=is_scope)
        for s in scopes:
            if not isinstance(s, Scope):
                raise LiftError(
                    f"lift.{self.transform}: expected a Scope (or a PyTree of scopes) as the "
                    f"first argument, got {type(s).__name__}."
                )
            s._check_valid()
        self.roots, self.paths = _dedup_scopes(scopes)
        self.hidden: list[frozenset[str]] = []

    def groups(self) -> tuple[VariableGroups, RngGroups]:
        """Stage 2: variables into groups (first match wins), rng streams (``LazyRng``s)
        as they are; the streams no filter matches are remembered as hidden."""
        per_root_vars = []
        per_root_rngs = []
        for root in self.roots:
            root._populate_collections()
            groups = _filters.group_collections(root._variables, self.in_filters)
            per_root_vars.append(tuple(as_arrays(g) for g in groups))
            rng_groups: list[dict[str, Any]] = [{} for _ in self.rng_filters]
            lifted: set[str] = set()
            for stream in root.rngs:
                for group, filt in zip(rng_groups, self.rng_filters):
                    if _filters.in_filter(filt, stream):
                        group[stream] = root.rngs[stream]  # a LazyRng: key plus path suffix
                        lifted.add(stream)
                        break
            per_root_rngs.append(tuple(rng_groups))
            self.hidden.append(frozenset(root.rngs) - lifted)
        return _transpose(per_root_vars) or (), _transpose(per_root_rngs) or ()

    def _debug_path(self, root: Scope) -> tuple[str, ...]:
        debug_path = root.debug_path
        if not self.name:
            return debug_path
        if not debug_path:
            return (f"{self.name}()",)
        return (*debug_path[:-1], f"{self.name}({debug_path[-1]})")

    def _inner_root(
        self, root: Scope, vgroups: Any, rgroups: Any, hide: frozenset[str], mfilter: Any
    ) -> Scope:
        mutable = _filters.intersect(root.mutable, self.out_union, mfilter)
        variables: dict[str, Any] = {}
        for group in vgroups:
            for col, value in group.items():
                variables[col] = _copy_dicts(value) if _filters.in_filter(mutable, col) else value
        rngs: dict[str, Any] = {}
        for group in rgroups:
            rngs.update(group)
        inner = Scope(
            variables,
            rngs=rngs,
            name=root.name,
            mutable=mutable,
            path=root.path,
            debug_path=self._debug_path(root),
            flags=root.flags,
        )
        inner._lift = LiftInfo(self.transform, self.in_union, hide, root._lift)
        inner.rng_counters = root.rng_counters  # shared, as in Flax
        return inner

    def scope_fn(
        self,
        variable_groups: VariableGroups,
        rng_groups: RngGroups,
        mutable_filter: Any = True,
    ) -> Any:
        """Stage 4: rebuild the scopes from (transformed) groups."""
        n_roots = len(self.roots)
        var_xs: Any = _transpose(variable_groups) or ((),) * n_roots
        rng_xs: Any = _transpose(rng_groups) or ((),) * n_roots
        mfilter = _filters.to_filter(mutable_filter)
        mapping = {
            root: self._inner_root(root, vgroups, rgroups, hide, mfilter)
            for root, vgroups, rgroups, hide in zip(self.roots, var_xs, rng_xs, self.hidden)
        }
        rebuilt = []
        for top, rel in self.paths:
            scope = mapping[top]
            for part in rel:
                scope = scope.push(part, reuse=True)
            rebuilt.append(scope)
        return jax.tree.unflatten(self.treedef, rebuilt)

    def repack_fn(self, inner_scope_tree: Any) -> VariableGroups:
        """Stage 5: the mutable variables of the inner scopes, grouped by output filter."""
        inner_scopes = self.treedef.flatten_up_to(inner_scope_tree)
        inner_roots, _ = _dedup_scopes(inner_scopes)
        out = []
        for inner in inner_roots:
            inner._populate_collections()
            mutable_vars = {
                col: value
                for col, value in inner._variables.items()
                if inner.is_mutable_collection(col)
            }
            groups = _filters.group_collections(mutable_vars, [*self.out_filters, pm.Everything()])
            if groups[-1]:
                raise LiftError(
                    f"lift.{self.transform}: collections {sorted(groups[-1])} of scope "
                    f'"{inner.path_text}" are mutable inside but match no output filter.'
                )
            inner.invalidate()
            out.append(groups[:-1])
        return _transpose(out) or ()

    def publish(self, out_variable_groups: Any) -> None:
        """Stage 6: write the returned groups into the original scopes."""
        per_root = _transpose(out_variable_groups) if out_variable_groups else ()
        for root, groups in zip(self.roots, per_root):
            for group in groups:
                for col, collection in group.items():
                    if not root.is_mutable_collection(col):
                        continue  # immutable state is never committed
                    for var_name, value in collection.items():
                        root.put_variable(col, var_name, value)


def pack(
    fn: Callable[..., Any],
    in_variable_filters: Sequence[Any],
    out_variable_filters: Sequence[Any],
    rng_filters: Sequence[Any],
    name: str | None = None,
    enable_kwargs: bool = False,
) -> Callable[..., Any]:
    """Lift ``fn`` over scopes: the building block of every lifted transform.

    **Arguments:**

    - ``fn``: ``(scope_fn, repack_fn, variable_groups, rng_groups, *args) -> (output,
      out_variable_groups)``. Call ``scope_fn(variable_groups, rng_groups)`` to rebuild
      the scopes (optionally ``mutable_filter=`` to restrict writes), run the body, and
      return ``repack_fn(scopes)`` next to the output.
    - ``in_variable_filters``: one collection filter per input group (first match wins;
      unmatched collections are not available inside).
    - ``out_variable_filters``: one filter per output group; only collections they match
      are mutable inside.
    - ``rng_filters``: one filter per rng group; matched streams (``LazyRng``s) are
      passed in, unmatched ones are not available inside.
    - ``name``: the transform's name, shown in scope paths (``/vmap(mlp)``) and errors.
    - ``enable_kwargs``: pass keyword arguments through to ``fn`` (otherwise they are
      ignored with a warning, as in Flax).

    Returns a function ``(scope_or_scopes, *args, **kwargs) -> output``.
    """

    @functools.wraps(fn)
    def wrapper(scope_tree: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs and not enable_kwargs:
            warnings.warn(
                f"lift.{name or 'pack'} does not take keyword arguments; "
                f"{', '.join(kwargs)} ignored.",
                RuntimeWarning,
                stacklevel=2,
            )
            kwargs = {}
        lifting = _Lifting(scope_tree, in_variable_filters, out_variable_filters, rng_filters, name)
        variable_groups, rng_groups = lifting.groups()
        y, out_variable_groups = fn(
            lifting.scope_fn, lifting.repack_fn, variable_groups, rng_groups, *args, **kwargs
        )
        lifting.publish(out_variable_groups)
        return y

    return wrapper
