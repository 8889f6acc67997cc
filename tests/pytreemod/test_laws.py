"""Property tests: the laws of partition/combine, variables dicts, filters and boxes."""

import functools
import itertools
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from hypothesis import given, settings

import pytreemod as pm

SETTINGS = settings(max_examples=50, deadline=None)


class LoRAParam(pm.Param, collection="lora"):
    pass


class Node(pm.Module):
    children: list[Any]
    table: dict[str, Any]
    leaf: Any
    size: int = pm.field(static=True, default=0)
    scale: float = 1.0


class Pair(pm.Module):
    left: Any
    right: Any


COLLECTIONS = ("params", "batch_stats", "cache", "intermediates", "lora")
VARIABLE_TYPES = (pm.Param, pm.BatchStat, pm.Cache, pm.Intermediate, LoRAParam)
KEYS = ("a", "b", "w", "children", "table", "leaf", "left", "right", 0, 1)

_counter = itertools.count()


def _array(shape: tuple[int, ...]) -> jax.Array:
    return jnp.full(shape, float(next(_counter)), dtype=jnp.float32)


shapes = st.lists(st.integers(1, 3), max_size=2).map(tuple)
arrays = shapes.map(_array)
variables = st.builds(lambda cls, x: cls(x), st.sampled_from(VARIABLE_TYPES), arrays)
scalars = st.one_of(
    st.integers(-3, 3), st.floats(-2, 2, allow_nan=False, width=32), st.sampled_from(["x", None])
)
boxes = arrays.map(lambda x: pm.Partitioned(x, ("embed",) * x.ndim))
leaves = st.one_of(variables, variables, arrays, scalars, boxes, boxes.map(pm.Param))


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(
            Node,
            st.lists(children, max_size=3),
            st.dictionaries(st.sampled_from(["a", "b", "w"]), children, max_size=2),
            children,
            size=st.integers(0, 2),
            scale=st.floats(-2, 2, allow_nan=False, width=32),
        ),
        st.builds(Pair, children, children),
        st.lists(children, min_size=1, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b"]), children, min_size=1, max_size=2),
    )


subtrees = st.recursive(leaves, _extend, max_leaves=12)


def _variables_of(tree: Any) -> list[pm.Variable]:
    return [
        x
        for x in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, pm.Variable))
        if isinstance(x, pm.Variable)
    ]


@st.composite
def models(draw: st.DrawFn) -> Any:
    """A Module (Node or Pair at the root), sometimes with one Variable tied at two places."""
    root = draw(
        st.builds(Pair, subtrees, subtrees)
        | st.builds(Node, st.lists(subtrees, max_size=3), st.just({}), subtrees)
    )
    found = _variables_of(root)
    if found and draw(st.booleans()):
        tied = found[draw(st.integers(0, len(found) - 1))]
        root = Pair(root, [tied, 1])
    return root


base_filters = st.one_of(
    st.sampled_from(COLLECTIONS),
    st.sampled_from((*VARIABLE_TYPES, pm.Variable)),
    st.sampled_from([True, False, None, ...]),
    st.builds(pm.PathContains, st.sampled_from(KEYS)),
)


def _compose(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(pm.Not, inner),
        st.builds(pm.DenyList, inner),
        st.builds(pm.Any, inner, inner),
        st.builds(pm.All, inner, inner),
        st.lists(inner, max_size=3),
    )


filters = st.recursive(base_filters, _compose, max_leaves=4)


# --- helpers ----------------------------------------------------------------------------


def _state_paths(state: Any) -> set[tuple[Any, ...]]:
    flat = jtu.tree_flatten_with_path(state, is_leaf=pm.is_box)[0]
    return {tuple(_key(k) for k in path) for path, _ in flat}


def _key(entry: Any) -> Any:
    return entry.key if isinstance(entry, jtu.DictKey) else entry


def _selected(model: Any, f: Any) -> set[tuple[Any, ...]]:
    return _state_paths(pm.state(model, f))


def _slots(model: Any) -> list[tuple[tuple[Any, ...], Any]]:
    """(path, value) of every variable slot that is stored in a state (aliases excluded)."""
    structure = pm.structure_of(model)
    values = {}
    for kp, leaf in jtu.tree_flatten_with_path(
        model, is_leaf=lambda x: isinstance(x, (pm.Variable, pm.AxisMetadata))
    )[0]:
        values[tuple(_plain(k) for k in kp)] = leaf
    return [
        (path, values[path])
        for path, alias in zip(structure.paths, structure.alias)
        if alias is None
    ]


def _plain(entry: Any) -> Any:
    if isinstance(entry, jtu.GetAttrKey):
        return entry.name
    if isinstance(entry, jtu.SequenceKey):
        return entry.idx
    return entry.key


def _sharing(tree: Any) -> list[int]:
    """For each Variable occurrence, the index of the first occurrence of the same object."""
    found = _variables_of(tree)
    first: dict[int, int] = {}
    return [first.setdefault(id(v), i) for i, v in enumerate(found)]


# --- partition / combine ----------------------------------------------------------------


@SETTINGS
@given(models(), st.lists(filters, max_size=3))
def test_combine_inverts_partition(model: Any, fs: list[Any]) -> None:
    structure, *states = pm.partition(model, *fs)
    assert len(states) == len(fs) + 1
    new = pm.combine(structure, *states)
    assert type(new) is type(model)
    assert new == model
    assert pm.structure_of(new) == structure
    assert hash(pm.structure_of(new)) == hash(structure)
    assert _sharing(new) == _sharing(model)
    assert pm.combine(structure, *reversed(states)) == model


@SETTINGS
@given(models(), st.lists(filters, max_size=3))
def test_first_match_puts_each_variable_in_exactly_one_state(model: Any, fs: list[Any]) -> None:
    _, *states = pm.partition(model, *fs)
    preds = [pm.to_filter(f) for f in fs]
    seen: set[tuple[Any, ...]] = set()
    for state in states:
        paths = _state_paths(state)
        assert not paths & seen
        seen |= paths
    slots = _slots(model)
    assert seen == {path for path, _ in slots}
    for path, value in slots:
        group = next((i for i, p in enumerate(preds) if p(path, value)), len(preds))
        assert path in _state_paths(states[group])


@SETTINGS
@given(models())
def test_to_variables_from_variables_is_identity(model: Any) -> None:
    variables = pm.to_variables(model)
    new = pm.from_variables(model, variables)
    assert new == model
    assert _sharing(new) == _sharing(model)
    assert pm.from_variables(pm.structure_of(model), variables) == model
    # Every variable sits in its own collection.
    for path, value in _slots(model):
        assert path in _state_paths(variables[pm.collection_of(value)])
    # The variables dict holds exactly what the rest state of an empty partition holds.
    merged: set[tuple[Any, ...]] = set()
    for coll_state in variables.values():
        merged |= _state_paths(coll_state)
    assert merged == _state_paths(pm.state(model))


@SETTINGS
@given(models())
def test_tree_map_identity_keeps_equality(model: Any) -> None:
    assert jax.tree.map(lambda x: x, model) == model


@SETTINGS
@given(models(), st.data())
def test_tree_at_replaces_exactly_one_leaf(model: Any, data: st.DataObject) -> None:
    flat = jtu.tree_flatten_with_path(model)[0]
    if not flat:
        return
    path, _ = flat[data.draw(st.integers(0, len(flat) - 1))]

    def where(tree: Any) -> Any:
        return functools.reduce(_get, path, tree)

    marker = "replaced"
    new = pm.tree_at(where, model, marker)
    assert where(new) == marker
    before = jtu.tree_flatten_with_path(model)[0]
    after = jtu.tree_flatten_with_path(new)[0]
    assert [p for p, _ in before] == [p for p, _ in after]
    for (p, x), (_, y) in zip(before, after):
        assert (y == marker) if p == path else (y is x)


def _get(node: Any, entry: Any) -> Any:
    if isinstance(entry, jtu.GetAttrKey):
        return getattr(node, entry.name)
    if isinstance(entry, jtu.SequenceKey):
        return node[entry.idx]
    return node[entry.key]


# --- filter algebra ---------------------------------------------------------------------


@SETTINGS
@given(models(), filters)
def test_double_negation(model: Any, f: Any) -> None:
    assert _selected(model, pm.Not(pm.Not(f))) == _selected(model, f)
    assert _selected(model, ~~pm.to_filter(f)) == _selected(model, f)


@SETTINGS
@given(models(), filters)
def test_negation_is_complement(model: Any, f: Any) -> None:
    everything = _selected(model, True)
    assert _selected(model, pm.Not(f)) == everything - _selected(model, f)
    assert _selected(model, pm.DenyList(f)) == everything - _selected(model, f)


@SETTINGS
@given(models(), filters, filters)
def test_union_and_intersection(model: Any, f: Any, g: Any) -> None:
    sf, sg = _selected(model, f), _selected(model, g)
    assert _selected(model, pm.Any(f, g)) == sf | sg
    assert _selected(model, [f, g]) == sf | sg
    assert _selected(model, pm.to_filter(f) | g) == sf | sg
    assert _selected(model, pm.All(f, g)) == sf & sg
    assert _selected(model, pm.to_filter(f) & g) == sf & sg


@SETTINGS
@given(filters)
def test_normalisation_is_idempotent_and_hashable(f: Any) -> None:
    normal = pm.to_filter(f)
    assert pm.to_filter(normal) == normal
    assert hash(pm.to_filter(f)) == hash(normal)
    assert pm.to_filter(pm.Not(pm.Not(f))) == normal


@SETTINGS
@given(models(), filters)
def test_matches_collection_is_sound(model: Any, f: Any) -> None:
    flt = pm.to_filter(f)
    for name in COLLECTIONS:
        verdict = flt.matches_collection(name)
        if verdict is None:
            continue
        for path, value in _slots(model):
            if pm.collection_of(value) == name:
                assert flt(path, value) is verdict, (flt, name, path)


# --- axis metadata ----------------------------------------------------------------------

names = st.one_of(st.none(), st.sampled_from(["batch", "embed", "mlp", "heads", "layers"]))


BOX_TYPES: list[type[pm.Partitioned]] = [pm.Partitioned, pm.LogicallyPartitioned]
"""Every axis-metadata box type the library ships; each must obey the inverse laws."""


@st.composite
def partitioned(draw: st.DrawFn, min_ndim: int = 0) -> pm.Partitioned:
    box_type = draw(st.sampled_from(BOX_TYPES))
    axis_names = draw(st.lists(names, min_size=min_ndim, max_size=4))
    value = jnp.zeros((2,) * len(axis_names), dtype=jnp.float32)
    return box_type(value, tuple(axis_names))


@SETTINGS
@given(partitioned(), st.data(), names)
def test_add_then_remove_axis_is_identity(
    x: pm.Partitioned, data: st.DataObject, name: Any
) -> None:
    n = len(x.names) + 1
    i = data.draw(st.integers(-n, n - 1))
    params = {pm.PARTITION_NAME: name} if name is not None else {}
    added = x.add_axis(i, params)
    assert len(added.names) == n
    assert added.names[i] == name
    assert type(added) is type(x)
    assert added.remove_axis(i, params) == x


@SETTINGS
@given(partitioned(min_ndim=1), st.data())
def test_remove_then_add_axis_is_identity(x: pm.Partitioned, data: st.DataObject) -> None:
    n = len(x.names)
    i = data.draw(st.integers(-n, n - 1))
    params = {pm.PARTITION_NAME: x.names[i]}
    assert x.remove_axis(i, params).add_axis(i, params) == x


def test_every_box_type_in_the_library_is_law_tested() -> None:
    def subclasses(cls: type) -> set[type]:
        direct = set(cls.__subclasses__())
        return direct.union(*(subclasses(c) for c in direct))

    shipped = {c for c in subclasses(pm.AxisMetadata) if c.__module__.startswith("pytreemod.")}
    assert shipped == set(BOX_TYPES)
