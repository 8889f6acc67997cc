"""The Linen LM example trains on a 2x4 mesh of simulated devices (tiny config), samples
with the decoding cache, and its backbone crosses the bridge. Its model source means the
same under Flax: same variable tree, same outputs on the same variables."""

import pathlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "linen_lm.py"
IMPORT = "from adapters import linen as nn\n"
TINY = ["--steps", "24", "--layers", "2", "--width", "32", "--context", "24", "--batch", "8"]
TINY += ["--sample-len", "12", "--learning-rate", "5e-3", "--no-plot", "--no-bridge"]


def _load(name: str, source: str) -> types.ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    module = types.ModuleType(name)
    module.__file__ = str(EXAMPLE)
    sys.modules[name] = module  # dataclasses look their module up by name
    exec(compile(source, str(EXAMPLE), "exec"), module.__dict__)
    return module


def _ours() -> types.ModuleType:
    return _load("linen_lm", EXAMPLE.read_text())


def _flax() -> types.ModuleType:
    source = EXAMPLE.read_text().replace(IMPORT, "from flax import linen as nn\n")
    return _load("linen_lm_flax", source)


@pytest.fixture(scope="module")
def run() -> Iterator[dict[str, Any]]:
    # optax's adam mixes an int32 count with floats: standard promotion for the run.
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield _ours().main(TINY)


def test_imports_are_the_only_adapters_line() -> None:
    source = EXAMPLE.read_text()
    assert IMPORT in source
    top_level = [line for line in source.splitlines() if line.startswith("from adapters")]
    assert top_level == [IMPORT.strip()]


def test_loss_goes_down_and_cached_sampling_matches(
    run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    losses = run["losses"]
    assert len(losses) == 24
    # Uniform over the 44 ids is ln(44) = 3.8 nats; 24 tiny steps get well below.
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.8, losses
    vocabulary = set(_ours().CORPUS)
    for prompt, text in zip(_ours().PROMPTS, run["samples"], strict=True):
        assert text.startswith(prompt) and len(text) == len(prompt) + 12
        assert set(text) <= vocabulary
    assert run["decode_gap"] < 1e-4  # the cache gives the logits of a full forward pass
    assert run["bridge_gap"] is None


def test_parameters_are_sharded_by_the_logical_rules(run: dict[str, Any]) -> None:
    blocks = run["params"]["backbone"]["blocks"]
    assert blocks["Dense_0"]["kernel"].sharding.spec == PartitionSpec(None, None, "model")
    query = blocks["MultiHeadDotProductAttention_0"]["query"]["kernel"]
    assert query.sharding.spec == PartitionSpec(None, None, "model", None)


def test_backbone_across_the_bridge_equals_linen_apply(run: dict[str, Any]) -> None:
    example = _ours()
    cfg = run["config"]
    data = example.Vocabulary(example.CORPUS, 4).encode(example.CORPUS)
    tokens = jnp.asarray(np.stack([data[i : i + 32] for i in (0, 100, 200, 300)]))
    with example.nn.logical_axis_rules(example.RULES):
        gap = example.bridge_check(cfg, run["params"], tokens, example.make_mesh())
    assert gap < 1e-5


def test_model_has_flax_variable_tree_and_outputs() -> None:
    ours, theirs = _ours(), _flax()
    cfg = ours.Config(vocab_size=16, width=16, layers=2, heads=4, max_len=12)
    tokens = jnp.arange(16, dtype=jnp.int32).reshape(2, 8) % 16

    def init(example: types.ModuleType, *, abstract: bool = True, **kw: Any) -> Any:
        with example.nn.logical_axis_rules(example.RULES):
            init = example.LM(cfg, **kw).init
            if abstract:
                return jax.eval_shape(init, jax.random.key(0), tokens)
            return jax.jit(init)(jax.random.key(0), tokens)

    def describe(tree: Any) -> Any:
        is_box = lambda x: hasattr(x, "names")
        return jax.tree.map(
            lambda x: (type(x).__name__, x.names, x.value.shape) if is_box(x) else x.shape,
            tree,
            is_leaf=is_box,
        )

    assert describe(init(ours)) == describe(init(theirs))
    assert describe(init(ours, decode=True)) == describe(init(theirs, decode=True))
    flax_vars = theirs.nn.unbox(init(theirs, abstract=False))
    with jax.numpy_rank_promotion("allow"):
        ys = [jax.jit(m.LM(cfg).apply)(flax_vars, tokens) for m in (ours, theirs)]
    np.testing.assert_allclose(ys[0], ys[1], rtol=1e-5, atol=1e-5)
