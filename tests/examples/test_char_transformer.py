"""The char-transformer example trains (tiny config), samples with the decoding cache, and
the cached decoding matches a full forward pass."""

import dataclasses
import importlib.util
import pathlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "char_transformer.py"

TINY = ["--d-model", "32", "--layers", "2", "--heads", "2", "--context", "32", "--batch", "8"]


def _load_example() -> types.ModuleType:
    if "char_transformer" in sys.modules:
        return sys.modules["char_transformer"]
    spec = importlib.util.spec_from_file_location("char_transformer", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["char_transformer"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_char_transformer_learns_and_samples(capsys: pytest.CaptureFixture[str]) -> None:
    example = _load_example()
    # The conftest is strict; optax needs standard dtype promotion (a Python float to the
    # power of an int32 count in adam's bias correction).
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        first, last, sample = example.main(
            [*TINY, "--steps", "60", "--learning-rate", "3e-3", "--sample-len", "40", "--no-plot"]
        )
    # Uniform over ~100 characters is ln(100) = 4.6 nats; 60 tiny steps get well below.
    assert last < first - 0.5, (first, last)
    assert isinstance(sample, str) and len(sample) == 40
    vocabulary = set(example.load_corpus())
    assert set(sample) <= vocabulary
    out = capsys.readouterr().out
    assert "loss" in out and "sample" in out


def test_cached_decoding_matches_full_forward() -> None:
    example = _load_example()
    config = example.Config(d_model=32, layers=2, heads=2, context=16)
    vocab = 11
    # The model itself is promotion-clean: this runs under the conftest's strict rules.
    model = pm.jit(example.CharTransformer)(vocab, config, key=jax.random.key(0))
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, vocab, (2, 10)), jnp.int32)
    full = pm.jit(model)(tokens)  # (2, 10, vocab); causal: position i sees tokens[:, :i+1]
    decode_step = pm.jit(example.decode_step)

    # A prompt of 4 positions at once, then one position per step through the cache.
    cached = model.init_cache(2)
    logits, cached = decode_step(cached, tokens[:, :4])
    steps = [logits]
    for i in range(4, 10):
        logits, cached = decode_step(cached, tokens[:, i : i + 1])
        steps.append(logits)
    decoded = jnp.concatenate(steps, axis=1)
    np.testing.assert_allclose(decoded, full, rtol=1e-4, atol=1e-4)
    index = cached.blocks.attn.cache_index
    assert index is not None
    assert index.value.tolist() == [10, 10]  # one index per stacked block

    # Decoding wrote only the cache: the parameters are the model's.
    assert pm.tree_equal(pm.state(cached, "params"), pm.state(model, "params"))

    # The jitted prefill of all 10 positions at once: the last position's logits, and the
    # same cache (keys, values, index) as the step-by-step decoding.
    last, prefilled = example.prefill(model.init_cache(2), tokens)
    np.testing.assert_allclose(last, full[:, -1], rtol=1e-4, atol=1e-4)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5),
        pm.state(prefilled, "cache"),
        pm.state(cached, "cache"),
    )


def test_resumed_run_has_the_loss_curve_of_an_uninterrupted_one(tmp_path: pathlib.Path) -> None:
    example = _load_example()
    config = example.Config(
        d_model=32, layers=2, heads=2, context=32, batch=4, steps=8, warmup=2, log_every=2
    )
    config = dataclasses.replace(config, checkpoint_every=3)
    text = example.load_corpus()
    vocab = len(example.Vocabulary(text))
    data = example.Vocabulary(text).encode(text)
    path = tmp_path / "run.safetensors"
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        whole = example.train(config, data, vocab, seed=3)
        # A run that dies before step 7 (its last checkpoint holds step 6) ...
        crashed = example.train(config, data, vocab, seed=3, checkpoint=path, stop_at=7)
        # ... and its resumption from that checkpoint, to the end.
        resumed = example.train(config, data, vocab, seed=3, checkpoint=path, resume=True)
    assert len(whole["losses"]) == 8 and len(set(whole["losses"])) == 8
    assert crashed["losses"] == whole["losses"][:7]
    assert resumed["start"] == 6
    assert resumed["losses"] == whole["losses"]  # the first 6 come from the checkpoint
    assert pm.tree_equal(pm.state(resumed["model"]), pm.state(whole["model"]))
    np.testing.assert_array_equal(
        jax.random.key_data(resumed["sample_key"]), jax.random.key_data(whole["sample_key"])
    )
    # The final checkpoint holds the end of the run; resuming from it trains no more.
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        again = example.train(config, data, vocab, seed=3, checkpoint=path, resume=True)
        assert again["start"] == 8 and again["losses"] == whole["losses"]
        # A checkpoint of another model is refused before anything is trained.
        other = dataclasses.replace(config, heads=4, d_model=16, layers=1)
        with pytest.raises(pm.CheckpointMismatchError, match=r"run\.safetensors"):
            example.train(other, data, vocab, checkpoint=path, resume=True)
