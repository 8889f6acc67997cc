"""Functional state updates: pm.apply, Variable.set/get, StateWriteError."""

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm


class Counter(pm.Module):
    count: pm.BatchStat[jax.Array]
    scale: pm.Param[jax.Array]

    def __call__(self, x: jax.Array) -> jax.Array:
        self.count.set(self.count.value + 1)
        return x * self.scale.value

    def peek(self) -> jax.Array:
        self.count.set(self.count.value + 10)
        return self.count.get()


def make() -> Counter:
    return Counter(pm.BatchStat(jnp.array(0, dtype=jnp.int32)), pm.Param(jnp.array(2.0)))


def test_apply_returns_updated_model_and_leaves_input_unchanged() -> None:
    model = make()
    y, new = pm.apply(model, jnp.array(3.0), mutable="batch_stats")
    assert float(y) == 6.0
    assert int(new.count.value) == 1
    assert int(model.count.value) == 0
    assert new.scale is model.scale  # unwritten variables are reused as they are


def test_apply_without_writes_returns_the_same_model() -> None:
    class Reader(pm.Module):
        w: pm.Param[jax.Array]

        def __call__(self) -> jax.Array:
            return self.w.value

    model = Reader(pm.Param(jnp.ones(2)))
    _, same = pm.apply(model, mutable=True)
    assert same is model


def test_get_sees_the_write_of_this_call_and_value_does_not() -> None:
    model = make()
    out, new = pm.apply(model.peek, mutable="batch_stats")
    assert int(out) == 10
    assert int(new.count.value) == 10
    assert int(model.count.get()) == 0  # outside apply: the stored value


def test_bound_method_updates_its_module() -> None:
    _, new = pm.apply(make().peek, mutable=["batch_stats"])
    assert isinstance(new, Counter)


def test_writing_an_immutable_collection_names_path_and_collection() -> None:
    with pytest.raises(
        pm.StateWriteError, match=r"Cannot update \.count: collection 'batch_stats'"
    ):
        pm.apply(make(), jnp.array(1.0), mutable="params")


def test_writing_outside_apply_is_an_error() -> None:
    with pytest.raises(pm.StateWriteError, match=r"outside pytreemod.apply"):
        make()(jnp.array(1.0))


def test_writing_a_variable_not_in_the_applied_model_is_an_error() -> None:
    other = make()

    class Meddler(pm.Module):
        w: pm.Param[jax.Array]

        def __call__(self) -> None:
            other.count.set(jnp.array(5, dtype=jnp.int32))

    with pytest.raises(pm.StateWriteError, match=r"not part of the model given to the innermost"):
        pm.apply(Meddler(pm.Param(jnp.ones(1))), mutable=True)
    with pytest.raises(pm.StateWriteError, match=r"belongs to another module, apply that module"):
        pm.apply(Meddler(pm.Param(jnp.ones(1))), mutable=True)


def test_apply_given_a_lambda_says_to_pass_the_module_or_a_method() -> None:
    model = make()
    x = jnp.array(1.0)
    with pytest.raises(
        pm.StateWriteError,
        match=r"apply was given a lambda, which is not a Module or a method of one.*"
        r"`pm\.apply\(module, \*args, mutable=\.\.\.\)`.*`pm\.apply\(module\.method,",
    ):
        pm.apply(lambda x: model(x), x, mutable="batch_stats")

    def run(x: jax.Array) -> jax.Array:
        return model.peek()

    with pytest.raises(pm.StateWriteError, match=r"given 'run', which is not a Module"):
        pm.apply(run, x, mutable="batch_stats")
    # What the message says to do works: the module, or a method of it.
    _, new = pm.apply(model, x, mutable="batch_stats")
    assert int(new.count.value) == 1
    out, new = pm.apply(model.peek, mutable="batch_stats")
    assert int(out) == 10 and int(new.count.value) == 10


def test_shared_variable_is_updated_everywhere() -> None:
    shared = pm.BatchStat(jnp.array(0, dtype=jnp.int32))

    class Pair(pm.Module):
        a: pm.BatchStat[jax.Array]
        b: pm.BatchStat[jax.Array]

        def __call__(self) -> None:
            self.a.set(self.a.value + 1)

    _, new = pm.apply(Pair(shared, shared), mutable="batch_stats")
    assert new.a is new.b
    assert int(new.b.value) == 1


def test_apply_inside_jit_and_nested_apply() -> None:
    @pm.jit
    def step(model: Counter, x: jax.Array) -> tuple[jax.Array, Counter]:
        return pm.apply(model, x, mutable="batch_stats")

    _, new = step(make(), jnp.array(1.0))
    _, newer = step(new, jnp.array(1.0))
    assert int(newer.count.value) == 2

    class Outer(pm.Module):
        inner: Counter

        def __call__(self, x: jax.Array) -> jax.Array:
            y, _ = pm.apply(self.inner, x, mutable="batch_stats")  # inner apply records it
            return y

    _, outer = pm.apply(Outer(make()), jnp.array(1.0), mutable=True)
    assert int(outer.inner.count.value) == 0  # the inner call's update was returned to it


def test_apply_inside_vmap_returns_per_member_state() -> None:
    models = pm.vmap(lambda _: make())(jnp.arange(3))

    def run(m: Counter, x: jax.Array) -> tuple[jax.Array, Counter]:
        return pm.apply(m, x, mutable="batch_stats")

    ys, new = pm.vmap(run)(models, jnp.arange(3.0))
    assert ys.shape == (3,)
    assert new.count.value.tolist() == [1, 1, 1]
