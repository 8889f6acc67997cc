"""The filter language: every form, normalisation, value semantics, operators, errors."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import pytreemod as pm


class LoRAParam(pm.Param, collection="lora_params"):
    pass


_ARR = jnp.zeros(2, dtype=jnp.float32)
P = pm.Param(_ARR)
B = pm.BatchStat(_ARR)
C = pm.Cache(_ARR)
I = pm.Intermediate(_ARR)  # noqa: E741
L = LoRAParam(_ARR)
BOXED = pm.Param(pm.Partitioned(_ARR, ("x",)))
VALUES = {"P": P, "B": B, "C": C, "I": I, "L": L, "bare": _ARR, "boxed": BOXED}


def selected(spec: Any, path: tuple[Any, ...] = ("a", 0, "w")) -> set[str]:
    f = pm.to_filter(spec)
    return {name for name, v in VALUES.items() if f(path, v)}


ALL = set(VALUES)


def _pred(path: tuple[Any, ...], value: Any) -> bool:
    return isinstance(value, pm.BatchStat)


@pytest.mark.parametrize(
    ("spec", "normal"),
    [
        ("params", pm.Collection("params")),
        (pm.Param, pm.OfType(pm.Param)),
        (True, pm.Everything()),
        (..., pm.Everything()),
        (False, pm.Nothing()),
        (None, pm.Nothing()),
        ([], pm.Nothing()),
        ((), pm.Nothing()),
        (pm.Any(), pm.Nothing()),
        (pm.All(), pm.Everything()),
        (["params"], pm.Collection("params")),
        (("params", "cache"), pm.Any("params", "cache")),
        (["params", pm.Cache], pm.Any(pm.Collection("params"), pm.OfType(pm.Cache))),
        (pm.All("params", pm.PathContains("w")), pm.All("params", pm.PathContains("w"))),
        (pm.All(pm.Cache), pm.OfType(pm.Cache)),
        (pm.Not("params"), pm.Not(pm.Collection("params"))),
        (pm.Not(pm.Not("params")), pm.Collection("params")),
        (pm.DenyList(pm.DenyList("cache")), pm.Collection("cache")),
        (pm.Not(True), pm.Nothing()),
        (pm.Not(None), pm.Everything()),
        (pm.PathContains("bias"), pm.PathContains("bias")),
        (_pred, pm.Predicate(_pred)),
    ],
)
def test_to_filter_normal_forms(spec: Any, normal: pm.Filter) -> None:
    f = pm.to_filter(spec)
    assert f == normal
    assert hash(f) == hash(normal)
    assert repr(f) == repr(normal)
    assert pm.to_filter(f) is f  # idempotent


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("params", {"P", "bare", "boxed"}),
        ("batch_stats", {"B"}),
        ("cache", {"C"}),
        ("intermediates", {"I"}),
        ("lora_params", {"L"}),
        (pm.Param, {"P", "L", "bare", "boxed"}),  # subclasses and bare arrays
        (LoRAParam, {"L"}),
        (pm.BatchStat, {"B"}),
        (pm.Variable, ALL),
        (pm.Partitioned, {"boxed"}),  # a box type matches the variable's value
        (True, ALL),
        (..., ALL),
        (False, set()),
        (None, set()),
        (pm.Not("params"), ALL - {"P", "bare", "boxed"}),
        (pm.DenyList(pm.Param), {"B", "C", "I"}),
        (pm.Any("cache", pm.BatchStat), {"B", "C"}),
        (["cache", "batch_stats"], {"B", "C"}),
        (("intermediates",), {"I"}),
        (pm.All(pm.Param, pm.Not("params")), {"L"}),
        (pm.PathContains("w"), ALL),
        (pm.PathContains(0), ALL),
        (pm.PathContains("bias"), set()),
        (_pred, {"B"}),
    ],
)
def test_what_each_form_selects(spec: Any, expected: set[str]) -> None:
    assert selected(spec) == expected


def test_path_contains_matches_keys_not_substrings() -> None:
    f = pm.PathContains("bias")
    assert f(("layers", 1, "bias"), P)
    assert not f(("layers", 1, "bias_scale"), P)
    assert not f(("layers", 1), P)
    assert pm.PathContains(1)(("layers", 1, "w"), P)


def test_predicate_receives_path_and_value() -> None:
    seen: list[tuple[Any, Any]] = []

    def record(path: tuple[Any, ...], value: Any) -> int:
        seen.append((path, value))
        return 1  # truthy non-bool: normalised to a bool

    f = pm.to_filter(record)
    assert f(("a", 3), P) is True
    assert seen == [(("a", 3), P)]


def test_denylist_is_a_not() -> None:
    d = pm.DenyList("params")
    assert isinstance(d, pm.Not)
    assert d.deny == pm.Collection("params")
    assert repr(d) == "DenyList(Collection(name='params'))"
    assert selected(d) == selected(pm.Not("params"))
    # Another spelling of the same filter: equal, same hash.
    assert d == pm.Not("params")
    assert pm.Not("params") == d
    assert hash(d) == hash(pm.Not("params"))
    assert d != pm.Not("cache")
    assert pm.to_filter(pm.Not(pm.Not(d))) == d


def test_reprs() -> None:
    assert repr(pm.to_filter(True)) == "Everything()"
    assert repr(pm.to_filter(None)) == "Nothing()"
    assert repr(pm.to_filter(["params", "cache"])) == (
        "Any(Collection(name='params'), Collection(name='cache'))"
    )
    assert repr(pm.All("params", pm.PathContains(0))) == (
        "All(Collection(name='params'), PathContains(key=0))"
    )
    assert repr(pm.Not("cache")) == "Not(filter=Collection(name='cache'))"


def test_value_semantics() -> None:
    a = pm.to_filter(["params", pm.BatchStat])
    b = pm.to_filter(("params", pm.BatchStat))
    assert a == b
    assert hash(a) == hash(b)
    assert a != pm.to_filter(["params", pm.Cache])
    assert pm.Any("a", "b") != pm.All("a", "b")
    assert pm.Any("a", "b") != pm.Any("b", "a")  # order is kept, not normalised away
    assert len({pm.to_filter("params"), pm.Collection("params"), pm.to_filter(pm.Param)}) == 2
    cache = {pm.to_filter(pm.Not("params")): 1}
    assert cache[pm.Not(pm.Collection("params"))] == 1


@pytest.mark.parametrize(
    ("f", "attr", "value"),
    [
        (pm.Collection("params"), "name", "cache"),
        (pm.Not("params"), "filter", pm.Nothing()),
        (pm.Any("params", "cache"), "filters", ()),
        (pm.All("params", "cache"), "filters", ()),
    ],
)
def test_filters_are_frozen(f: pm.Filter, attr: str, value: Any) -> None:
    with pytest.raises(AttributeError):
        setattr(f, attr, value)


def test_operators() -> None:
    f = pm.to_filter("params")
    assert ~f == pm.Not("params")
    assert ~~f == f
    assert f | "cache" == pm.Any("params", "cache")
    assert f & pm.PathContains("w") == pm.All("params", pm.PathContains("w"))
    assert ~pm.to_filter(True) == pm.Nothing()
    assert selected(f | pm.BatchStat) == {"P", "bare", "boxed", "B"}
    assert selected(pm.to_filter(pm.Param) & ~pm.to_filter("params")) == {"L"}


@pytest.mark.parametrize(
    ("spec", "name", "expected"),
    [
        ("params", "params", True),
        ("params", "cache", False),
        (pm.Param, "params", True),
        (pm.Param, "lora_params", None),  # a subclass may or may not be in it
        (LoRAParam, "lora_params", True),
        (pm.BatchStat, "params", None),
        (True, "anything", True),
        (False, "anything", False),
        (pm.Not("params"), "params", False),
        (pm.Not("params"), "cache", True),
        (pm.Not(pm.PathContains("w")), "params", None),
        (pm.Any("params", "cache"), "cache", True),
        (pm.Any("params", "cache"), "batch_stats", False),
        (pm.Any("params", pm.PathContains("w")), "cache", None),
        (pm.All("params", pm.PathContains("w")), "params", None),
        (pm.All("params", pm.PathContains("w")), "cache", False),
        (pm.All("params", pm.Param), "params", True),
        (pm.PathContains("w"), "params", None),
        (_pred, "batch_stats", None),
    ],
)
def test_matches_collection(spec: Any, name: str, expected: bool | None) -> None:
    assert pm.to_filter(spec).matches_collection(name) is expected


@pytest.mark.parametrize(
    "spec", [3, 2.5, b"params", {"params": 1}, object(), jnp.ones(2, dtype=jnp.float32)]
)
def test_unknown_form_raises(spec: Any) -> None:
    with pytest.raises(
        pm.InvalidFilterError,
        match=r"is not a filter\. A filter is a collection name \('params'\), a Variable type.*"
        r"True or \.\.\. \(everything\), False or None \(nothing\), Not\(f\) or DenyList\(f\), "
        r"Any\(\.\.\.\) or a list/tuple \(union\), All\(\.\.\.\) \(intersection\), "
        r"PathContains\(key\), or a predicate fn\(path, value\) -> bool",
    ):
        pm.to_filter(spec)


def test_unknown_form_nested_raises_early() -> None:
    with pytest.raises(pm.InvalidFilterError, match=r"3 \(of type int\)"):
        pm.Not(3)  # pyright: ignore[reportArgumentType]
    with pytest.raises(pm.InvalidFilterError, match=r"2\.5 \(of type float\)"):
        pm.Any("params", 2.5)
    with pytest.raises(pm.InvalidFilterError):
        pm.to_filter(["params", [object()]])
    # It is a TypeError too, and a PytreemodError.
    with pytest.raises(TypeError):
        pm.to_filter(3)
    with pytest.raises(pm.PytreemodError, match="is not a filter"):
        pm.All(3)


def test_bare_arrays_count_as_params() -> None:
    for arr in (jnp.ones(3, dtype=jnp.float32), np.ones(3, dtype=np.float32)):
        assert pm.to_filter("params")((), arr)
        assert pm.to_filter(pm.Param)((), arr)
        assert pm.to_filter(pm.Variable)((), arr)
        assert not pm.to_filter(pm.BatchStat)((), arr)
        assert not pm.to_filter(LoRAParam)((), arr)
        assert not pm.to_filter("batch_stats")((), arr)


def test_filters_select_inside_partition() -> None:
    tree = {"w": P, "mean": B, "x": jax.numpy.ones(1, dtype=jnp.float32)}
    _, sel, rest = pm.partition(tree, ~pm.to_filter(pm.BatchStat) & pm.PathContains("w"))
    assert set(sel) == {"w"}
    assert set(rest) == {"mean", "x"}


# ----------------------------------------------------------------------------- unknown names


def test_collection_typo_is_reported_where_state_is_selected(tmp_path: Any) -> None:
    tree = {"w": P, "mean": B}
    msg = (
        r"partition: no variable has collection 'parms' \(a typo\?\)\. The tree's collections "
        r"are 'batch_stats', 'params'; the declared collections are '\w+'"
    )
    with pytest.raises(pm.InvalidFilterError, match=msg):
        pm.partition(tree, "parms")
    with pytest.raises(pm.InvalidFilterError, match=r"collection 'parms'"):
        pm.state(tree, ~pm.Collection("parms"))  # nested inside Not/Any/All too
    with pytest.raises(pm.InvalidFilterError, match=r"collection 'batch_stat'"):
        pm.partition(tree, ["params", "batch_stat"])
    with pytest.raises(pm.InvalidFilterError, match=r"collection 'parms'"):
        pm.TrainState.create(tree, optax.sgd(0.1), wrt="parms")
    with pytest.raises(pm.InvalidFilterError, match=r"grad: DiffState: .*'parms'"):
        pm.grad(lambda t: jnp.sum(t["w"].value), argnums=pm.DiffState(0, "parms"))(tree)
    with pytest.raises(pm.InvalidFilterError, match=r"StateAxes: .*'parms'"):
        pm.StateAxes({"parms": 0, ...: None})
    with pytest.raises(pm.InvalidFilterError, match=r"jit: DonateState: .*'parms'"):
        pm.jit(lambda t: t, donate_argnums=(pm.DonateState(0, "parms"),))(tree)
    model = pm.nn.BatchNorm(2, key=jax.random.key(0))
    with pytest.raises(
        pm.InvalidFilterError,
        match=r"apply\(mutable=\.\.\.\): no variable has collection 'batch_stat' .*The tree's "
        r"collections are 'batch_stats', 'params'",
    ):
        pm.apply(model, jnp.ones((3, 2)), mutable="batch_stat")
    out, _ = pm.apply(model, jnp.ones((3, 2)), mutable=["batch_stats", "intermediates"])
    assert out.shape == (3, 2)  # a declared collection the model lacks is fine
    path = tmp_path / "m.safetensors"
    pm.save(path, tree)
    with pytest.raises(
        pm.InvalidFilterError, match=r"load\(filter=\.\.\.\): no variable has collection 'parms'"
    ):
        pm.load(path, tree, filter="parms")


def test_declared_collection_the_tree_lacks_selects_nothing() -> None:
    # Generic code passes "batch_stats" for models with and without BatchNorm.
    _, stats, cache, rest = pm.partition({"w": P}, "batch_stats", "cache")
    assert stats == {} and cache == {} and set(rest) == {"w"}
    assert pm.state({"w": P}, LoRAParam) == {}
    assert pm.state({"w": P}, "lora_params") == {}  # declared by LoRAParam (this file)

    class Late(pm.Variable[jax.Array], collection="late_collection"):
        pass

    assert pm.state({"late": Late(jnp.ones(1))}, "late_collection")["late"].shape == (1,)
