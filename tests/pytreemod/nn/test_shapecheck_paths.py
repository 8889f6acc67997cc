"""A ShapeError raised inside a model names the failing layer's path from the outermost
module called, eagerly and under tracing, and costs nothing when nothing fails."""

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from pytreemod import _where
from pytreemod.nn import functional as F

Key = Callable[[], jax.Array]

LINEAR_5_4 = (
    r"\(x=f32\[2, 4\]\): dimension 'in_features' does not agree: it is 5 in 'kernel' "
    r"\(f32\[5, 4\].* \(checked in pytreemod.nn.functional.linear\)"
)


class Mlp(pm.Module):
    up: pm.nn.Linear
    down: pm.nn.Linear

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(jax.nn.relu(self.up(x)))


class Block(pm.Module):
    mlp: Mlp

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.mlp(x)


class Tower(pm.Module):
    blocks: list[Block]

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return x


def _tower(getkey: Key, bad: int) -> Tower:
    """Four blocks of 4 -> 4 -> 4 MLPs; block ``bad``'s ``down`` expects 5 features."""

    def block(i: int) -> Block:
        down_in = 5 if i == bad else 4
        up = pm.nn.Linear(4, 4, key=getkey())
        return Block(Mlp(up, pm.nn.Linear(down_in, 4, key=getkey())))

    return Tower([block(i) for i in range(4)])


RUNS: dict[str, Callable[[Any, jax.Array], Any]] = {
    "eager": lambda model, x: model(x),
    "pm.jit": lambda model, x: pm.jit(model)(x),
    "jax.jit": lambda model, x: jax.jit(lambda m, v: m(v))(model, x),
    "eval_shape": lambda model, x: jax.eval_shape(model, x),
}


@pytest.mark.parametrize("run", list(RUNS), ids=list(RUNS))
def test_of_two_linears_the_wrong_one_is_named(getkey: Key, run: str) -> None:
    class Pair(pm.Module):
        first: pm.nn.Linear
        second: pm.nn.Linear

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.second(self.first(x))

    model = Pair(pm.nn.Linear(3, 4, key=getkey()), pm.nn.Linear(5, 4, key=getkey()))
    with pytest.raises(pm.ShapeError, match=r"^Pair\.second" + LINEAR_5_4):
        RUNS[run](model, jnp.ones((2, 3)))


@pytest.mark.parametrize("run", list(RUNS), ids=list(RUNS))
def test_a_layer_deep_in_a_list_of_blocks_is_named_by_its_path(getkey: Key, run: str) -> None:
    model = _tower(getkey, bad=2)
    with pytest.raises(pm.ShapeError, match=r"^Tower\.blocks\[2\]\.mlp\.down" + LINEAR_5_4):
        RUNS[run](model, jnp.ones((2, 4)))


@pytest.mark.parametrize("run", list(RUNS), ids=list(RUNS))
def test_the_path_is_from_the_module_called_not_the_whole_model(getkey: Key, run: str) -> None:
    model = _tower(getkey, bad=3)
    with pytest.raises(pm.ShapeError, match=r"^Block\.mlp\.down" + LINEAR_5_4):
        RUNS[run](model.blocks[3], jnp.ones((2, 4)))


def test_a_layer_called_alone_keeps_its_class_and_method(getkey: Key) -> None:
    with pytest.raises(pm.ShapeError, match=r"^Linear\.__call__" + LINEAR_5_4):
        jax.jit(lambda m, x: m(x))(pm.nn.Linear(5, 4, key=getkey()), jnp.ones((2, 4)))


@pytest.mark.parametrize("run", list(RUNS), ids=list(RUNS))
def test_attention_projections_are_named_as_the_users_layer(getkey: Key, run: str) -> None:
    class Encoder(pm.Module):
        attn: pm.nn.MultiHeadAttention

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.attn(x)

    model = Encoder(pm.nn.MultiHeadAttention(2, 8, key=getkey()))
    with pytest.raises(pm.ShapeError) as info:
        RUNS[run](model, jnp.ones((2, 5, 7)))
    message = str(info.value)
    assert message.startswith("Encoder.attn.query(x=f32[2, 5, 7]): dimension 'in_features'")
    assert "ProjectHeads" not in message  # the user never built one


def test_the_path_holds_with_trace_reuse_on_and_off(getkey: Key) -> None:
    model = _tower(getkey, bad=1)
    x = jnp.ones((2, 4))
    jax.make_jaxpr(lambda m, v: m.blocks[0](v))(model, x)  # the good layers' traces are cached
    for disabled in (False, True):
        with pm.disable_trace_once(disabled):
            with pytest.raises(pm.ShapeError, match=r"^Tower\.blocks\[1\]\.mlp\.down"):
                jax.make_jaxpr(lambda m, v: m(v))(model, x)


def test_a_method_other_than_call_and_a_layer_reached_through_another(getkey: Key) -> None:
    class Model(pm.Module):
        mlp: Mlp

        def encode(self, x: jax.Array) -> jax.Array:
            return self.mlp.down(x)  # mlp's own __call__ never runs

    model = Model(Mlp(pm.nn.Linear(4, 4, key=getkey()), pm.nn.Linear(5, 4, key=getkey())))
    with pytest.raises(pm.ShapeError, match=r"^Model\.mlp\.down" + LINEAR_5_4):
        pm.jit(model.encode)(jnp.ones((2, 4)))


def test_a_functional_op_in_a_users_module_is_named_by_the_modules_path() -> None:
    class Scale(pm.Module):
        weight: jax.Array

        def __call__(self, x: jax.Array) -> jax.Array:
            return F.linear(x, self.weight)

    class Model(pm.Module):
        layers: tuple[Scale, ...]

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = layer(x)
            return x

    model = Model((Scale(jnp.ones((2, 3))), Scale(jnp.ones((2, 2)))))
    with pytest.raises(
        pm.ShapeError,
        match=r"^Model\.layers\[1\]\(x=f32\[4, 3\]\): dimension 'in_features' does not agree.*"
        r"\(checked in pytreemod.nn.functional.linear\)",
    ):
        jax.jit(lambda m, x: m(x))(model, jnp.ones((4, 2)))


def test_a_typechecked_method_of_a_nested_module_is_named_by_its_path() -> None:
    from jaxtyping import Float

    class Pairwise(pm.Module, typecheck=True):
        def __call__(
            self, a: Float[jax.Array, " n"], b: Float[jax.Array, " n"]
        ) -> Float[jax.Array, " n"]:
            return a * b

    class Model(pm.Module):
        inner: dict[str, Pairwise]

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.inner["mul"](x, x[:-1])

    with pytest.raises(
        pm.ShapeError,
        match=r"^Model\.inner\.mul\(a=f32\[3\], b=f32\[2\]\): dimension 'n' does not agree",
    ):
        pm.jit(Model({"mul": Pairwise()}))(jnp.ones(3))


def test_a_layer_of_a_scanned_stack_is_named_with_a_wildcard_index(getkey: Key) -> None:
    class Deep(pm.Module):
        blocks: Block  # four blocks stacked on a leading axis

        def __call__(self, x: jax.Array) -> jax.Array:
            @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry)
            def body(h: jax.Array, block: Block) -> jax.Array:
                return block(h)

            return body(x, self.blocks)

    def block(k: jax.Array) -> Block:
        k1, k2 = jax.random.split(k)
        return Block(Mlp(pm.nn.Linear(4, 4, key=k1), pm.nn.Linear(5, 4, key=k2)))

    model = Deep(pm.vmap(block)(jax.random.split(getkey(), 4)))
    with pytest.raises(pm.ShapeError, match=r"^Deep\.blocks\[\*\]\.mlp\.down" + LINEAR_5_4):
        pm.jit(model)(jnp.ones((2, 4)))


def test_a_module_not_held_by_its_caller_is_named_by_its_class(getkey: Key) -> None:
    class Caller(pm.Module):
        scale: float

        def __call__(self, layer: pm.nn.Linear, x: jax.Array) -> jax.Array:
            return layer(x) * self.scale

    with pytest.raises(pm.ShapeError, match=r"^Linear\.__call__" + LINEAR_5_4):
        Caller(2.0)(pm.nn.Linear(5, 4, key=getkey()), jnp.ones((2, 4)))


# ----------------------------------------------------------------------------- no cost


def test_nothing_is_looked_up_when_nothing_fails(
    getkey: Key, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(_where, "model_path", lambda *a: calls.append(a) or (a[0], ""))
    model = _tower(getkey, bad=-1)
    x = jnp.ones((2, 4))
    model(x)
    pm.jit(model)(x)
    jax.jit(lambda m, v: m(v))(model, x)
    assert calls == []
    with pytest.raises(pm.ShapeError):
        model(jnp.ones((2, 3)))
    assert calls  # the stub stands where the path is computed


def _without_source_tables(hlo: str) -> str:
    """Optimised HLO text without its tables of source locations and the references into
    them: an executable loaded from XLA's compilation cache (the suite's conftest turns it
    on) lists the same frames in another order."""
    hlo = re.sub(r"\n(FileNames|FunctionNames|FileLocations|StackFrames)\n(.+\n)*", "\n", hlo)
    return re.sub(r" stack_frame_id=\d+", "", hlo)


def test_the_compiled_step_is_the_same_with_and_without_path_lookup(
    getkey: Key, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _tower(getkey, bad=-1)
    attn = pm.nn.MultiHeadAttention(2, 4, key=getkey())
    x = jnp.ones((2, 3, 4))

    def step(m: Tower, a: pm.nn.MultiHeadAttention, v: jax.Array) -> jax.Array:
        return jnp.sum(a(m(v)) ** 2)

    def compiled() -> tuple[str, str]:
        jaxpr = str(jax.make_jaxpr(jax.grad(step))(model, attn, x))
        text = jax.jit(jax.grad(step)).lower(model, attn, x).compile().as_text()
        return jaxpr, _without_source_tables(str(text))

    results = []
    for lookup in (True, False):  # one calling line: the programs' source locations agree
        if not lookup:
            monkeypatch.setattr(_where, "model_path", lambda module, frame: (module, ""))
        with pm.disable_trace_once():  # a fresh trace each time, not a cached one
            results.append(compiled())
    with_lookup, without_lookup = results
    assert "dot_general" in with_lookup[0]
    assert with_lookup == without_lookup


def test_a_layer_a_transform_rebuilt_inside_the_model_is_named(getkey: Key) -> None:
    class Checkpointed(pm.Module):
        mlp: Mlp

        def __call__(self, x: jax.Array) -> jax.Array:
            return pm.remat(lambda m, v: m(v))(self.mlp, x)  # a copy of mlp, of tracers

    model = Checkpointed(Mlp(pm.nn.Linear(4, 4, key=getkey()), pm.nn.Linear(5, 4, key=getkey())))
    with pytest.raises(pm.ShapeError, match=r"^Checkpointed\.mlp\.down" + LINEAR_5_4):
        model(jnp.ones((2, 4)))


def test_a_layer_built_during_the_call_is_not_taken_for_a_field(getkey: Key) -> None:
    class Builder(pm.Module):
        fc: pm.nn.Linear

        def __call__(self, x: jax.Array) -> jax.Array:
            return pm.nn.Linear(5, 4, key=jax.random.key(0))(x)  # same kind as fc, not fc

    with pytest.raises(pm.ShapeError, match=r"^Linear\.__call__" + LINEAR_5_4):
        Builder(pm.nn.Linear(5, 4, key=getkey()))(jnp.ones((2, 4)))


@pytest.mark.parametrize("run", list(RUNS), ids=list(RUNS))
def test_a_recurrent_cells_projection_is_named_through_the_rnn(getkey: Key, run: str) -> None:
    rnn = pm.nn.RNN(pm.nn.LSTMCell(3, 4, key=getkey()))
    with pytest.raises(pm.ShapeError, match=r"^RNN\.cell\.projections\.ii\(x=f32\[2, 5\]\)"):
        RUNS[run](rnn, jnp.ones((2, 6, 5)))
