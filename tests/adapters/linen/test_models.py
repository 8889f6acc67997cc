"""Whole Linen models written once against a namespace ``nn`` and run on flax.linen and
adapters.linen: the same variables and the same outputs on Flax's variables (training
with dropout rngs given explicitly, evaluation, autoregressive decoding)."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import adapters.linen as ours

from ._flax_compare import assert_same_tree, flax_linen, standard


def _models(nn: Any) -> dict[str, Any]:
    class MlpBlock(nn.Module):
        hidden: int
        dropout: float = 0.1

        @nn.compact
        def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
            y = nn.Dense(self.hidden, kernel_init=nn.initializers.xavier_uniform())(x)
            y = nn.gelu(y)
            y = nn.Dropout(self.dropout)(y, deterministic=deterministic)
            return nn.Dense(x.shape[-1])(y)

    class DecoderBlock(nn.Module):
        heads: int
        decode: bool = False

        @nn.compact
        def __call__(self, x: jax.Array, mask: Any, deterministic: bool) -> jax.Array:
            y = nn.LayerNorm()(x)
            y = nn.MultiHeadDotProductAttention(
                self.heads, dropout_rate=0.1, decode=self.decode, deterministic=deterministic
            )(y, mask=mask)
            x = x + nn.Dropout(0.1)(y, deterministic=deterministic)
            return x + MlpBlock(4 * x.shape[-1])(nn.RMSNorm()(x), deterministic)

    class LM(nn.Module):
        vocab: int = 11
        features: int = 16
        layers: int = 1
        decode: bool = False

        @nn.compact
        def __call__(self, ids: jax.Array, train: bool = False) -> jax.Array:
            embed = nn.Embed(self.vocab, self.features, name="embed")
            x = embed(ids)
            pos = self.param("pos", nn.initializers.normal(0.02), (1, 32, self.features))
            x = x + pos[:, : ids.shape[1]]
            mask = None
            if not self.decode:
                mask = nn.combine_masks(
                    nn.make_causal_mask(ids), nn.make_attention_mask(ids > 0, ids > 0)
                )
            for i in range(self.layers):
                x = DecoderBlock(4, decode=self.decode, name=f"block_{i}")(x, mask, not train)
            return embed.attend(nn.LayerNorm(name="final_norm")(x))

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
            x = nn.Conv(8, (3, 3))(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            x = nn.avg_pool(nn.relu(x), (2, 2), strides=(2, 2))
            x = nn.Conv(16, (3, 3), padding="VALID")(x)
            x = nn.GroupNorm(num_groups=4)(x)
            x = nn.max_pool(nn.swish(x), (2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.Dropout(0.5, deterministic=not train)(x)
            return nn.log_softmax(nn.Dense(10)(x))

    return {"LM": LM, "CNN": CNN}


def _both(name: str, **kwargs: Any) -> tuple[Any, Any]:
    return _models(flax_linen())[name](**kwargs), _models(ours)[name](**kwargs)


IDS = jnp.array([[3, 5, 7, 0], [1, 9, 4, 8]])


def test_language_model_training_and_evaluation() -> None:
    theirs, mine = _both("LM")
    results = []
    with standard():
        variables = jax.jit(theirs.init)(jax.random.key(0), IDS)
        assert_same_tree(jax.eval_shape(mine.init, jax.random.key(0), IDS), variables, values=False)
        for m in (mine, theirs):
            out = jax.jit(jax.value_and_grad(lambda v, m=m: m.apply(v, IDS).sum()))(variables)
            results.append(out)
    assert_same_tree(results[0], results[1], tol=1e-4)


def test_language_model_decoding_matches_flax() -> None:
    theirs, mine = _both("LM", decode=True)
    with standard():
        variables = theirs.init(jax.random.key(0), IDS)
        assert_same_tree(mine.init(jax.random.key(0), IDS), variables, values=False)
        params, caches = variables["params"], {}
        for m, key in ((theirs, "theirs"), (mine, "ours")):
            cache, outs = variables["cache"], []
            for t in range(IDS.shape[1]):
                logits, state = m.apply(
                    {"params": params, "cache": cache}, IDS[:, t : t + 1], mutable=["cache"]
                )
                cache = state["cache"]
                outs.append(logits)
            caches[key] = (jnp.concatenate(outs, axis=1), cache)
    assert_same_tree(caches["ours"], caches["theirs"])


def test_cnn_with_batch_statistics() -> None:
    theirs, mine = _both("CNN")
    x = jax.random.normal(jax.random.key(1), (2, 8, 8, 3))
    with standard():
        variables = jax.jit(theirs.init)(jax.random.key(0), x)
        assert_same_tree(jax.eval_shape(mine.init, jax.random.key(0), x), variables, values=False)
        evals = [jax.jit(m.apply)(variables, x) for m in (mine, theirs)]
        assert_same_tree(evals[0], evals[1])

        def train(m: Any, v: Any) -> Any:
            rngs = {"dropout": jax.random.key(2)}
            return m.apply(v, x, train=True, mutable=["batch_stats"], rngs=rngs)

        train_ours, train_theirs = (
            jax.jit(train, static_argnums=0)(m, variables) for m in (mine, theirs)
        )
    # Dropout masks come from each library's own rng derivation; the statistics don't.
    assert_same_tree(train_ours[1], train_theirs[1])
    np.testing.assert_array_equal(train_ours[0].shape, (2, 10))
