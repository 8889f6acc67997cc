"""FrozenDict and the dict helpers."""

import jax
import jax.numpy as jnp
import pytest

from adapters.core import FrozenDict, copy, freeze, pop, pretty_repr, unfreeze


def test_frozen_dict_is_an_immutable_hashable_mapping() -> None:
    d = FrozenDict({"a": 1, "b": {"c": 2}})
    assert isinstance(d["b"], FrozenDict) and d["b"]["c"] == 2
    assert len(d) == 2 and set(d) == {"a", "b"} and "a" in d
    assert hash(d) == hash(FrozenDict({"b": {"c": 2}, "a": 1}))
    assert d == {"a": 1, "b": {"c": 2}} and d != {"a": 1}
    with pytest.raises(ValueError, match="FrozenDict is immutable"):
        d["a"] = 3  # type: ignore[index]
    with pytest.raises(AttributeError, match="immutable"):
        d.x = 1  # type: ignore[attr-defined]


def test_helpers() -> None:
    d = freeze({"a": 1, "b": {"c": 2}})
    plain = unfreeze(d)
    assert type(plain) is dict and type(plain["b"]) is dict
    assert freeze(d) == d
    assert copy(d, {"a": 5})["a"] == 5 and type(copy(d)) is FrozenDict
    assert copy({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}
    rest, value = pop(d, "a")
    assert value == 1 and set(rest) == {"b"} and isinstance(rest, FrozenDict)
    rest2, value2 = pop({"a": 1, "b": 2}, "b")
    assert rest2 == {"a": 1} and value2 == 2
    assert d.unfreeze() == plain
    with pytest.raises(TypeError, match="copy expects a dict"):
        copy([1], {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pop expects a dict"):
        pop([1], 0)  # type: ignore[arg-type]


def test_pretty_repr() -> None:
    assert pretty_repr({"a": {"b": 1}}) == "{\n    a: {\n        b: 1,\n    },\n}"
    assert pretty_repr(FrozenDict()) == "FrozenDict({})"
    assert repr(FrozenDict({"a": 1})) == "FrozenDict({\n    a: 1,\n})"
    assert pretty_repr(3) == "3"


def test_pytree_with_keys_and_pickle() -> None:
    import pickle

    d = FrozenDict({"b": jnp.ones(2), "a": jnp.zeros(1)})
    doubled = jax.tree.map(lambda x: x * 2, d)
    assert isinstance(doubled, FrozenDict)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(d)[0]]
    assert paths == ["['a']", "['b']"]
    assert pickle.loads(pickle.dumps(FrozenDict({"a": 1}))) == FrozenDict({"a": 1})
