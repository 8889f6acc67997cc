"""MultiHeadAttention: numerics vs jnp and Flax, masks, cross attention, decoding cache."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from pytreemod.nn import functional as F

from ._compare import close, linen, run_linen

Key = Callable[[], jax.Array]
normal = jax.nn.initializers.normal(0.3)


def _layer(getkey: Key, **kwargs: object) -> pm.nn.MultiHeadAttention:
    return pm.nn.MultiHeadAttention(4, 16, bias_init=normal, key=getkey(), **kwargs)  # type: ignore[arg-type]


def _reference(
    layer: pm.nn.MultiHeadAttention, xq: jax.Array, xkv: jax.Array, mask: jax.Array | None
) -> jax.Array:
    """Attention written out in jax.numpy from the layer's parameters."""

    def proj(p: pm.nn.ProjectHeads, x: jax.Array) -> jax.Array:
        assert p.bias is not None
        return jnp.einsum("...d,dhk->...hk", x, p.kernel.value) + p.bias.value[None, None]

    q, k, v = proj(layer.query, xq), proj(layer.key, xkv), proj(layer.value, xkv)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    if mask is not None:
        logits = jnp.where(mask, logits, -jnp.inf)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
    assert layer.out.bias is not None
    bias = layer.out.bias.value[None, None]
    return jnp.einsum("bqhd,hdo->bqo", out, layer.out.kernel.value) + bias


def test_parameter_names_and_shapes_are_flax_ones(getkey: Key) -> None:
    layer = pm.nn.MultiHeadAttention(4, 16, qkv_features=32, out_features=8, key=getkey())
    params = pm.to_variables(layer)["params"]
    shapes = jax.tree.map(jnp.shape, params)
    assert shapes == {
        "query": {"kernel": (16, 4, 8), "bias": (4, 8)},
        "key": {"kernel": (16, 4, 8), "bias": (4, 8)},
        "value": {"kernel": (16, 4, 8), "bias": (4, 8)},
        "out": {"kernel": (4, 8, 8), "bias": (8,)},
    }


def test_self_attention_with_causal_mask_matches_reference_and_flax(getkey: Key) -> None:
    nn = linen()
    layer = _layer(getkey)
    x = jax.random.normal(getkey(), (2, 6, 16))
    mask = pm.nn.make_causal_mask(jnp.ones((2, 6)))
    y = layer(x, mask=mask)
    close(y, _reference(layer, x, x, mask))
    ref = run_linen(nn.MultiHeadDotProductAttention(4), pm.to_variables(layer), x, mask=mask)
    close(y, ref)


def test_cross_attention_with_padding_mask_matches_flax(getkey: Key) -> None:
    nn = linen()
    layer = pm.nn.MultiHeadAttention(4, 16, kv_features=12, out_features=10, bias_init=normal,
                                     key=getkey())
    xq = jax.random.normal(getkey(), (2, 5, 16))
    mem = jax.random.normal(getkey(), (2, 7, 12))
    valid = jnp.arange(7)[None, :] < jnp.array([[7], [4]])
    mask = pm.nn.make_attention_mask(jnp.ones((2, 5), bool), valid)
    y = layer(xq, mem, mask=mask)
    assert y.shape == (2, 5, 10)
    ref = run_linen(nn.MultiHeadDotProductAttention(4, out_features=10), pm.to_variables(layer),
                    xq, mem, mask=mask)
    close(y, ref)
    vals = jax.random.normal(getkey(), (2, 7, 12))
    ref_kv = run_linen(nn.MultiHeadDotProductAttention(4, out_features=10),
                       pm.to_variables(layer), xq, mem, vals)
    close(layer(xq, mem, vals), ref_kv)


def test_normalize_qk_matches_flax(getkey: Key) -> None:
    nn = linen()
    layer = _layer(getkey, normalize_qk=True)
    x = jax.random.normal(getkey(), (2, 6, 16))
    ref = run_linen(nn.MultiHeadDotProductAttention(4, normalize_qk=True), pm.to_variables(layer),
                    x)
    close(layer(x), ref)


def test_default_initializers_match_flax(getkey: Key) -> None:
    """Flax initialises DenseGeneral kernels as flat matrices; so do we (same values)."""
    nn = linen()
    key = getkey()
    layer = pm.nn.MultiHeadAttention(4, 16, key=key)
    kq = jax.random.split(key, 4)[0]
    kernel_key, _ = jax.random.split(kq)
    flax_init = nn.MultiHeadDotProductAttention.__dataclass_fields__["kernel_init"].default
    expected = flax_init(kernel_key, (16, 16), jnp.float32).reshape(16, 4, 4)
    close(layer.query.kernel.value, expected, tol=0)


def test_implementation_xla_agrees_with_the_default(getkey: Key) -> None:
    q, k, v = (jax.random.normal(getkey(), (2, 6, 4, 8)) for _ in range(3))
    mask = F.make_causal_mask(jnp.ones((2, 6)))
    close(F.dot_product_attention(q, k, v, mask=mask),
          F.dot_product_attention(q, k, v, mask=mask, implementation="xla"))


def test_functional_attention_matches_flax_function(getkey: Key) -> None:
    nn = linen()
    q, k, v = (jax.random.normal(getkey(), (2, 3, 6, 4, 8)) for _ in range(3))  # 2 batch axes
    bias = jax.random.normal(getkey(), (1, 1, 4, 6, 6))
    ours = F.dot_product_attention(q, k, v, bias=bias)
    close(ours, nn.dot_product_attention(q, k, v, bias=bias))
    close(F.dot_product_attention_weights(q, k), nn.dot_product_attention_weights(q, k))


def test_attention_dropout(getkey: Key) -> None:
    layer = _layer(getkey, dropout_rate=0.5)
    x = jax.random.normal(getkey(), (2, 6, 16))
    close(layer(x, deterministic=True), _reference(layer, x, x, None))
    a, b = layer(x, key=jax.random.key(1)), layer(x, key=jax.random.key(2))
    assert not jnp.allclose(a, b)
    with pytest.raises(pm.LayerConfigError, match=r"dropout_rate=0.5\) in training needs a PRNG"):
        layer(x)


def test_configuration_errors(getkey: Key) -> None:
    with pytest.raises(pm.LayerConfigError, match=r"qkv_features=10 is not divisible by num_hea"):
        pm.nn.MultiHeadAttention(4, 10, key=getkey())
    layer = _layer(getkey)
    with pytest.raises(pm.LayerConfigError, match=r"needs a decoding cache.*init_cache"):
        pm.apply(layer.decode, jnp.ones((1, 1, 16)), mutable="cache")
    with pytest.raises(pm.LayerConfigError, match=r"inputs_v was given without inputs_k"):
        layer(jnp.ones((1, 2, 16)), None, jnp.ones((1, 2, 16)))


def test_shape_errors_name_the_layer_and_dimension(getkey: Key) -> None:
    layer = _layer(getkey)
    with pytest.raises(
        pm.ShapeError,
        match=r"ProjectHeads.__call__\(x=f32\[2, 5, 12\]\): dimension 'in_features' does not "
        r"agree: it is 16 in 'kernel' \(f32\[16, 4, 4\], axis 0",
    ):
        layer(jnp.ones((2, 5, 16)), jnp.ones((2, 5, 12)))


# ----------------------------------------------------------------------------- decoding


def test_decoding_step_by_step_equals_full_causal_attention(getkey: Key) -> None:
    layer = _layer(getkey)
    x = jax.random.normal(getkey(), (2, 7, 16))
    full = layer(x, mask=pm.nn.make_causal_mask(jnp.ones((2, 7))))

    @pm.jit
    def step(model: pm.nn.MultiHeadAttention, xt: jax.Array):
        return pm.apply(model.decode, xt, mutable="cache")

    model = layer.init_cache(2, max_len=8)
    outs = []
    for t in range(7):
        y, model = step(model, x[:, t : t + 1])
        outs.append(y)
    close(jnp.concatenate(outs, axis=1), full)
    assert model.cache_index is not None and int(model.cache_index.value) == 7
    assert model.cached_key is not None
    assert pm.to_variables(model)["cache"]["cached_key"].shape == (2, 8, 4, 4)


def test_decoding_a_prompt_chunk_then_steps(getkey: Key) -> None:
    layer = _layer(getkey)
    x = jax.random.normal(getkey(), (2, 6, 16))
    full = layer(x, mask=pm.nn.make_causal_mask(jnp.ones((2, 6))))
    model = layer.init_cache(2, max_len=6)
    prompt, model = pm.apply(model.decode, x[:, :4], mutable="cache")
    rest = []
    for t in (4, 5):
        y, model = pm.apply(model.decode, x[:, t : t + 1], mutable="cache")
        rest.append(y)
    close(jnp.concatenate([prompt, *rest], axis=1), full)


def test_decoding_twice_in_one_apply_sees_its_own_writes(getkey: Key) -> None:
    layer = _layer(getkey).init_cache(1, max_len=4)
    x = jax.random.normal(getkey(), (1, 2, 16))

    def two_steps(m: pm.nn.MultiHeadAttention) -> jax.Array:
        return jnp.concatenate([m.decode(x[:, :1]), m.decode(x[:, 1:])], axis=1)

    class Wrapper(pm.Module):
        attn: pm.nn.MultiHeadAttention

        def __call__(self) -> jax.Array:
            return two_steps(self.attn)

    ys, new = pm.apply(Wrapper(layer), mutable="cache")
    close(ys, layer(x, mask=pm.nn.make_causal_mask(jnp.ones((1, 2)))))
    assert new.attn.cache_index is not None and int(new.attn.cache_index.value) == 2


def test_decoding_matches_flax_decode(getkey: Key) -> None:
    nn = linen()
    layer = _layer(getkey)
    x = jax.random.normal(getkey(), (2, 3, 16))
    flax_layer = nn.MultiHeadDotProductAttention(4, decode=True)
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        cache = flax_layer.init(jax.random.key(0), jnp.zeros((2, 3, 16)))["cache"]
    variables = {"params": pm.to_variables(layer)["params"], "cache": cache}
    model = layer.init_cache(2, max_len=3)
    for t in range(3):
        ref, updates = run_linen(flax_layer, variables, x[:, t : t + 1], mutable=["cache"])
        variables = {**variables, "cache": updates["cache"]}
        y, model = pm.apply(model.decode, x[:, t : t + 1], mutable="cache")
        close(y, ref)
    assert model.cached_value is not None
    close(model.cached_value.value, variables["cache"]["cached_value"])


def test_writing_the_cache_needs_it_mutable(getkey: Key) -> None:
    layer = _layer(getkey).init_cache(1, max_len=2)
    with pytest.raises(pm.StateWriteError, match=r"Cannot update \.cached_key: collection 'cache'"):
        pm.apply(layer.decode, jnp.ones((1, 1, 16)), mutable="batch_stats")


def test_overfull_cache_is_an_error_when_the_index_is_known(getkey: Key) -> None:
    layer = _layer(getkey).init_cache(1, max_len=2)
    with pytest.raises(pm.LayerConfigError, match=r"decoding cache is full: writing 3 step"):
        pm.apply(layer.decode, jnp.ones((1, 3, 16)), mutable="cache")


def test_masks_helpers() -> None:
    causal = F.make_causal_mask(jnp.ones((2, 3)))
    assert causal.shape == (2, 1, 3, 3) and causal.dtype == jnp.bool_
    pad = F.make_attention_mask(jnp.array([[1, 1, 0]]), jnp.array([[1, 0, 1]]))
    assert pad[0, 0].astype(int).tolist() == [[1, 0, 1], [1, 0, 1], [0, 0, 0]]
    both = F.combine_masks(causal[:1], pad)
    assert both is not None and both[0, 0].astype(int).tolist() == [[1, 0, 0], [1, 0, 0], [0, 0, 0]]
    assert F.combine_masks(None, None) is None
