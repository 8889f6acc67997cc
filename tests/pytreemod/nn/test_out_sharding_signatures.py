"""Every public ``pm.nn`` layer call and every public ``pm.nn.functional`` op that produces
arrays takes an ``out_sharding=`` override (checked on the signatures, so a new layer or
op without one fails here); the exceptions are listed with the reason."""

import inspect
from typing import Any

import pytest

import pytreemod as pm
from pytreemod.nn import functional as F

# Public pm.nn classes that are not layers (no __call__ on arrays).
NOT_LAYERS = {
    "ConvOptions": "a bundle of convolution options, not a layer",
    "ConvTransposeOptions": "a bundle of transposed-convolution options, not a layer",
}

# Public functional names without out_sharding, and why it makes no sense there.
NO_OUT_SHARDING = {
    "DotGeneral": "a type alias, not an op",
    "PaddingLike": "a type alias, not an op",
    "Projection": "a type alias, not an op",
    "ScanFn": "a type alias, not an op",
    "canonicalize_padding": "returns padding pairs, not arrays",
    "conv_local_shapes": "returns shapes, not arrays",
    "einsum_bias_shape": "returns a shape, not arrays",
    "dense_projections": "returns a projection function, not arrays",
    "promote_dtype": "casts its inputs, which keep their own shardings",
    "batch_stats": "batch statistics: reductions consumed by batch_norm (which takes one)",
    "compute_stats": "statistics: reductions consumed by normalize (which takes one)",
    "ema": "updates a running statistic, which keeps its variable's sharding",
    "make_attention_mask": "a boolean mask broadcast into attention (which takes one)",
    "make_causal_mask": "a boolean mask broadcast into attention (which takes one)",
    "combine_masks": "a boolean mask broadcast into attention (which takes one)",
    "update_kv_cache": "the cache must keep its sharding: it is the decode step's state",
    "flip_sequences": "reorders time steps inside rnn (which takes one); keeps x's sharding",
    "select_last_carry": "selects carries inside rnn; each keeps the carry's sharding",
}


def _public_classes() -> dict[str, Any]:
    return {
        name: obj
        for name, obj in vars(pm.nn).items()
        if not name.startswith("_") and inspect.isclass(obj)
    }


LAYERS = sorted(n for n, c in _public_classes().items() if issubclass(c, pm.Module))


def test_every_public_class_is_a_layer_or_listed() -> None:
    others = {n for n, c in _public_classes().items() if not issubclass(c, pm.Module)}
    assert others == set(NOT_LAYERS)
    assert len(LAYERS) > 20


@pytest.mark.parametrize("name", LAYERS)
def test_layer_call_takes_out_sharding(name: str) -> None:
    params = inspect.signature(getattr(pm.nn, name).__call__).parameters
    assert "out_sharding" in params
    assert params["out_sharding"].default is None


@pytest.mark.parametrize("name", sorted(set(F.__all__) - set(NO_OUT_SHARDING)))
def test_functional_op_takes_out_sharding(name: str) -> None:
    params = inspect.signature(getattr(F, name)).parameters
    assert "out_sharding" in params
    assert params["out_sharding"].default is None


def test_the_exceptions_are_public_and_lack_it() -> None:
    for name in NO_OUT_SHARDING:
        obj = getattr(F, name)
        assert name in F.__all__
        if callable(obj) and not inspect.isclass(obj):
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue
            assert "out_sharding" not in params, f"{name} takes it now: drop it from the list"
