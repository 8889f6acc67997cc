"""adapters.nnx filters: Flax's filter language (a string is a tag) as pytreemod filters."""

import jax.numpy as jnp
import pytest

import pytreemod as pm
from adapters import nnx
from adapters.nnx import filterlib


def test_to_predicate_normal_forms_like_flax():
    assert filterlib.to_predicate("rng") == nnx.WithTag("rng")
    assert filterlib.to_predicate(nnx.Param) == nnx.OfType(nnx.Param)
    assert filterlib.to_predicate(True) == nnx.Everything() == filterlib.to_predicate(...)
    assert filterlib.to_predicate(None) == nnx.Nothing() == filterlib.to_predicate(False)
    assert filterlib.to_predicate([nnx.Param, "t"]) == nnx.Any(nnx.Param, "t")

    def fn(path, x):
        return True

    assert filterlib.to_predicate(fn) is fn
    with pytest.raises(TypeError, match="Invalid collection filter: 3"):
        filterlib.to_predicate(3)
    with pytest.raises(ValueError, match=r"`\.\.\.` or `True` can only be used as the last"):
        filterlib.filters_to_predicates([True, nnx.Param])


def test_a_string_filter_is_a_tag_not_a_collection():
    key = nnx.Variable(jnp.zeros(2), tag="dropout")
    assert nnx.WithTag("dropout")((), key) and not nnx.WithTag("params")((), key)
    assert not filterlib.to_predicate("params")((), nnx.Param(1))  # pytreemod: collection
    assert pm.to_filter("params")((), nnx.Param(1))
    rngs_state = nnx.state(nnx.Rngs(params=0, dropout=1))
    dropout = nnx.filter_state(rngs_state, "dropout")
    assert list(dropout) == ["dropout"] and set(dropout["dropout"]) == {"key", "count"}


def test_combinators_and_their_reprs():
    v, b = nnx.Param(1, tag="x"), nnx.BatchStat(2)
    either = nnx.Any(nnx.Param, "y")
    both = nnx.All(nnx.Param, "x")
    assert either((), v) and not either((), b) and both((), v)
    assert nnx.Not(nnx.Param)((), b) and not nnx.Not(nnx.Param)((), v)
    assert repr(both) == "All(OfType(" + repr(nnx.Param) + "), WithTag('x'))"
    assert repr(nnx.Not("x")) == "Not(WithTag('x'))"
    assert nnx.Any(nnx.Param).predicates == (nnx.OfType(nnx.Param),)
    assert nnx.Not(nnx.Param).predicate == nnx.OfType(nnx.Param)
    assert isinstance(either, pm.Filter) and (~nnx.OfType(nnx.Param))((), b)
    assert hash(nnx.All("a")) == hash(nnx.All("a"))


def test_of_type_is_isinstance_only_and_path_filters():
    assert not nnx.OfType(jnp.ndarray)((), nnx.Param(jnp.ones(1)))  # no look into the value
    assert not nnx.OfType(nnx.Param)((), jnp.ones(1))  # a bare array is not a Param here
    assert nnx.PathContains("kernel")(("layer", "kernel"), None)
    assert nnx.PathContains("ker", exact=False)(("layer", "kernel"), None)
    assert not nnx.PathContains("ker")(("layer", "kernel"), None)
    assert repr(nnx.PathContains("k", exact=False)) == "PathContains('k', exact=False)"
    within = filterlib.PathIn(("a", 0), ("b",))
    assert within(("b",), None) and not within(("a",), None)
    assert within == filterlib.PathIn(("b",), ("a", 0)) and hash(within)
