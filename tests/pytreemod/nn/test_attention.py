"""MultiHeadAttention: numerics vs jnp and Flax, masks, cross attention, decoding cache."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from pytreemod.nn import functional as F

from ._compare import close, jcall, linen, make, randn, run_linen

Key = Callable[[], jax.Array]
normal = jax.nn.initializers.normal(0.3)


def _layer(getkey: Key, **kwargs: object) -> pm.nn.MultiHeadAttention:
    return make(pm.nn.MultiHeadAttention, 4, 16, bias_init=normal, key=getkey(), **kwargs)


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
    layer = jax.eval_shape(
        lambda k: pm.nn.MultiHeadAttention(4, 16, qkv_features=32, out_features=8, key=k),
        getkey(),
    )
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
    x = randn(getkey(), (2, 6, 16))
    mask = pm.nn.make_causal_mask(jnp.ones((2, 6)))
    y = jcall(lambda m, v: m(v, mask=mask), layer, x)
    close(y, jcall(_reference, layer, x, x, mask))
    ref = run_linen(nn.MultiHeadDotProductAttention(4), pm.to_variables(layer), x, mask=mask)
    close(y, ref)


def test_cross_attention_with_padding_mask_matches_flax(getkey: Key) -> None:
    nn = linen()
    layer = make(
        pm.nn.MultiHeadAttention,
        4,
        16,
        kv_features=12,
        out_features=10,
        bias_init=normal,
        key=getkey(),
    )
    xq = randn(getkey(), (2, 5, 16))
    mem = randn(getkey(), (2, 7, 12))
    valid = jnp.arange(7)[None, :] < jnp.array([[7], [4]])
    mask = pm.nn.make_attention_mask(jnp.ones((2, 5), bool), valid)
    y = jcall(lambda m, q, k: m(q, k, mask=mask), layer, xq, mem)
    assert y.shape == (2, 5, 10)
    ref = run_linen(
        nn.MultiHeadDotProductAttention(4, out_features=10),
        pm.to_variables(layer),
        xq,
        mem,
        mask=mask,
    )
    close(y, ref)
    vals = randn(getkey(), (2, 7, 12))
    ref_kv = run_linen(
        nn.MultiHeadDotProductAttention(4, out_features=10), pm.to_variables(layer), xq, mem, vals
    )
    close(jcall(layer, xq, mem, vals), ref_kv)


def test_normalize_qk_matches_flax(getkey: Key) -> None:
    nn = linen()
    layer = _layer(getkey, normalize_qk=True)
    x = randn(getkey(), (2, 6, 16))
    ref = run_linen(
        nn.MultiHeadDotProductAttention(4, normalize_qk=True), pm.to_variables(layer), x
    )
    close(jcall(layer, x), ref)


def test_default_initializers_match_flax(getkey: Key) -> None:
    """Flax initialises DenseGeneral kernels as flat matrices; so do we (same values)."""
    nn = linen()
    key = getkey()
    layer = pm.nn.MultiHeadAttention(4, 16, key=key)
    kernel_key = jax.random.split(key, 4)[0]  # a projection's kernel draws from its own key
    flax_init = nn.MultiHeadDotProductAttention.__dataclass_fields__["kernel_init"].default
    expected = flax_init(kernel_key, (16, 16), jnp.float32).reshape(16, 4, 4)
    close(layer.query.kernel.value, expected, tol=0)


def test_implementation_xla_agrees_with_the_default(getkey: Key) -> None:
    q, k, v = (randn(getkey(), (2, 6, 4, 8)) for _ in range(3))
    mask = F.make_causal_mask(jnp.ones((2, 6)))
    both = jcall(
        lambda q, k, v: (
            F.dot_product_attention(q, k, v, mask=mask),
            F.dot_product_attention(q, k, v, mask=mask, implementation="xla"),
        ),
        q,
        k,
        v,
    )
    close(*both)
    q2, k2, v2 = (t.reshape(1, 2, 6, 4, 8) for t in (q, k, v))  # several batch axes
    close(
        jcall(lambda q, k, v: F.dot_product_attention(q, k, v, implementation="xla"), q2, k2, v2)[
            0
        ],
        jcall(lambda q, k, v: F.dot_product_attention(q, k, v), q, k, v),
    )


def test_functional_attention_matches_flax_function(getkey: Key) -> None:
    nn = linen()
    q, k, v = (randn(getkey(), (2, 3, 6, 4, 8)) for _ in range(3))  # 2 batch axes
    bias = randn(getkey(), (1, 1, 4, 6, 6))

    def run(attention, weights):
        return attention(q, k, v, bias=bias), weights(q, k)

    ours = jcall(run, F.dot_product_attention, F.dot_product_attention_weights)
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        theirs = jax.jit(run, static_argnums=(0, 1))(
            nn.dot_product_attention, nn.dot_product_attention_weights
        )
    close(ours[0], theirs[0])
    close(ours[1], theirs[1])


def test_attention_dropout(getkey: Key) -> None:
    layer = _layer(getkey, dropout_rate=0.5)
    x = randn(getkey(), (2, 6, 16))
    close(
        jcall(lambda m, v: m(v, deterministic=True), layer, x), jcall(_reference, layer, x, x, None)
    )
    train = pm.jit(lambda m, v, k: m(v, key=k))
    a, b = train(layer, x, jax.random.key(1)), train(layer, x, jax.random.key(2))
    assert not jnp.allclose(a, b)
    with pytest.raises(pm.LayerConfigError, match=r"dropout_rate=0.5\) in training needs a PRNG"):
        jax.eval_shape(layer, x)


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
        match=r"^MultiHeadAttention.key\(x=f32\[2, 5, 12\]\): dimension 'in_features' does not "
        r"agree: it is 16 in 'kernel' \(f32\[16, 4, 4\], axis 0",
    ):
        jax.eval_shape(layer, jnp.ones((2, 5, 16)), jnp.ones((2, 5, 12)))


# ----------------------------------------------------------------------------- decoding


def test_decoding_step_by_step_equals_full_causal_attention(getkey: Key) -> None:
    layer = _layer(getkey)
    x = randn(getkey(), (2, 7, 16))
    full = jcall(lambda m, v: m(v, mask=pm.nn.make_causal_mask(jnp.ones((2, 7)))), layer, x)

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
    x = randn(getkey(), (2, 6, 16))
    full = jcall(lambda m, v: m(v, mask=pm.nn.make_causal_mask(jnp.ones((2, 6)))), layer, x)
    model = layer.init_cache(2, max_len=6)
    step = pm.jit(lambda m, v: pm.apply(m.decode, v, mutable="cache"))
    prompt, model = step(model, x[:, :4])
    rest = []
    for t in (4, 5):
        y, model = step(model, x[:, t : t + 1])
        rest.append(y)
    close(jnp.concatenate([prompt, *rest], axis=1), full)


def test_decoding_twice_in_one_apply_sees_its_own_writes(getkey: Key) -> None:
    layer = _layer(getkey).init_cache(1, max_len=4)
    x = randn(getkey(), (1, 2, 16))

    def two_steps(m: pm.nn.MultiHeadAttention) -> jax.Array:
        return jnp.concatenate([m.decode(x[:, :1]), m.decode(x[:, 1:])], axis=1)

    class Wrapper(pm.Module):
        attn: pm.nn.MultiHeadAttention

        def __call__(self) -> jax.Array:
            return two_steps(self.attn)

    ys, new = jcall(lambda w: pm.apply(w, mutable="cache"), Wrapper(layer))
    close(ys, jcall(lambda m, v: m(v, mask=pm.nn.make_causal_mask(jnp.ones((1, 2)))), layer, x))
    assert new.attn.cache_index is not None and int(new.attn.cache_index.value) == 2


def test_decoding_matches_flax_decode(getkey: Key) -> None:
    nn = linen()
    layer = _layer(getkey)
    x = randn(getkey(), (2, 3, 16))
    flax_layer = nn.MultiHeadDotProductAttention(4, decode=True)
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        cache = jax.eval_shape(flax_layer.init, jax.random.key(0), jnp.zeros((2, 3, 16)))
        cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), cache["cache"])
    variables = {"params": pm.to_variables(layer)["params"], "cache": cache}
    model = layer.init_cache(2, max_len=3)
    step = pm.jit(lambda m, v: pm.apply(m.decode, v, mutable="cache"))
    flax_step = jax.jit(lambda v, xt: flax_layer.apply(v, xt, mutable=["cache"]))
    for t in range(3):
        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            ref, updates = flax_step(variables, x[:, t : t + 1])
        variables = {**variables, "cache": updates["cache"]}
        y, model = step(model, x[:, t : t + 1])
        close(y, ref)
    assert model.cached_value is not None
    close(model.cached_value.value, variables["cache"]["cached_value"])


def test_writing_the_cache_needs_it_mutable(getkey: Key) -> None:
    layer = _layer(getkey).init_cache(1, max_len=2)
    with pytest.raises(pm.StateWriteError, match=r"Cannot update \.cached_key: collection 'cache'"):
        jax.eval_shape(
            lambda m, v: pm.apply(m.decode, v, mutable="batch_stats"), layer, jnp.ones((1, 1, 16))
        )


def test_overfull_cache_is_an_error_when_the_index_is_known(getkey: Key) -> None:
    layer = _layer(getkey).init_cache(1, max_len=2)
    with pytest.raises(pm.LayerConfigError, match=r"decoding cache is full: writing 3 step"):
        pm.apply(layer.decode, jnp.ones((1, 3, 16)), mutable="cache")


def test_overfull_cache_under_jit_fails_with_the_message(getkey: Key) -> None:
    model = _layer(getkey).init_cache(1, max_len=2)
    step = pm.jit(lambda m, v: pm.apply(m.decode, v, mutable="cache"))
    x = jnp.ones((1, 1, 16))
    _, model = step(model, x)
    _, model = step(model, x)
    with pytest.raises(
        Exception,
        match=r"decoding cache is full: writing 1 step\(s\) at position 2 exceeds its max_len=2",
    ):
        jax.block_until_ready(step(model, x))


def test_overfull_cache_inside_a_scan_fails(getkey: Key) -> None:
    model = _layer(getkey).init_cache(1, max_len=3)

    @pm.jit
    def run(m: pm.nn.MultiHeadAttention, xs: jax.Array) -> jax.Array:
        def body(m: pm.nn.MultiHeadAttention, xt: jax.Array):
            y, m = pm.apply(m.decode, xt, mutable="cache")
            return m, y

        return jax.lax.scan(body, m, xs)[1]

    assert run(model, jnp.ones((3, 1, 1, 16))).shape == (3, 1, 1, 16)
    with pytest.raises(Exception, match=r"decoding cache is full.*position 3"):
        jax.block_until_ready(run(model, jnp.ones((4, 1, 1, 16))))


def test_overfull_cache_check_under_vmap_fails_only_when_one_overflows() -> None:
    cache = jnp.zeros((2, 3, 1, 2))
    step = jax.jit(
        jax.vmap(
            lambda i: F.update_kv_cache(
                cache, cache, i, jnp.ones((2, 1, 1, 2)), jnp.ones((2, 1, 1, 2))
            )[2]
        )
    )
    assert step(jnp.array([0, 2])).tolist() == [1, 3]
    with pytest.raises(Exception, match=r"decoding cache is full.*max_len=3"):
        jax.block_until_ready(step(jnp.array([0, 3])))


def test_cache_check_keeps_gradients_flowing(getkey: Key) -> None:
    model = _layer(getkey).init_cache(1, max_len=2)

    def loss(x: jax.Array) -> jax.Array:
        return jnp.sum(pm.apply(model.decode, x, mutable="cache")[0])

    grad = jax.jit(jax.grad(loss))(jnp.ones((1, 1, 16)))
    assert grad.shape == (1, 1, 16) and bool(jnp.all(jnp.isfinite(grad)))


def test_masks_helpers() -> None:
    causal = F.make_causal_mask(jnp.ones((2, 3)))
    assert causal.shape == (2, 1, 3, 3) and causal.dtype == jnp.bool_
    pad = F.make_attention_mask(jnp.array([[1, 1, 0]]), jnp.array([[1, 0, 1]]))
    assert pad[0, 0].astype(int).tolist() == [[1, 0, 1], [1, 0, 1], [0, 0, 0]]
    both = F.combine_masks(causal[:1], pad)
    assert both is not None and both[0, 0].astype(int).tolist() == [[1, 0, 0], [1, 0, 0], [0, 0, 0]]
    assert F.combine_masks(None, None) is None


def test_error_if_under_vmap_stays_a_branch_and_reports_the_batch() -> None:
    from pytreemod.nn._checks import error_if

    def f(i: jax.Array) -> jax.Array:
        return error_if(i, i > 3, "i={i} is past 3", ValueError, i=i)

    step = jax.vmap(jax.vmap(f))
    ids = jnp.zeros((2, 3), jnp.int32)
    # The predicate is reduced over the batch: a real cond, so the callback only runs
    # when a check fails (not a select that calls back on every step).
    assert "cond[" in str(jax.make_jaxpr(step)(ids))
    assert jax.jit(step)(ids).shape == (2, 3)
    with pytest.raises(Exception, match=r"ValueError: i=\[\[0, 0, 0\], \[0, 9, 0\]\] is past 3"):
        jax.block_until_ready(jax.jit(step)(ids.at[1, 1].set(9)))
    with pytest.raises(ValueError, match=r"i=9 is past 3"):
        f(jnp.array(9))
