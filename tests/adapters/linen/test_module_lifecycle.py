"""Linen Module lifecycle: the dataclass transform, lazy setup, freezing, unbound
modules, hashing, repr, descriptors, interceptors, named calls, threads."""

import dataclasses
import inspect
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn
from adapters import errors
from adapters.core import Scope


class Scale(nn.Module):
    features: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.param("w", jax.nn.initializers.ones, (x.shape[-1], self.features))
        return x @ w


# ----------------------------------------------------------------------------- dataclass


def test_parent_and_name_are_last_and_keyword_only() -> None:
    class A(nn.Module):
        a: int

    class B(A):
        b: int = 1

    assert [f.name for f in dataclasses.fields(B)] == ["a", "b", "parent", "name"]
    params = inspect.signature(B).parameters
    assert params["parent"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["parent"].default is nn.module._unspecified_parent
    with pytest.raises(TypeError, match="positional argument"):
        B(1, 2, None)  # type: ignore[misc]


def test_kw_only_class_argument() -> None:
    class Base(nn.Module, kw_only=True):
        scale: int = 2

    class Child(Base):
        n: int

    with pytest.raises(TypeError, match="positional argument"):
        Base(3)  # type: ignore[misc]
    assert Child(5).n == 5 and Child(5).scale == 2


def test_reserved_attribute_names() -> None:
    with pytest.raises(
        errors.ReservedModuleAttributeError, match="`parent` and `name` are reserved"
    ):

        class Bad(nn.Module):
            name: int  # type: ignore[assignment]


def test_post_init_may_set_attributes_before_super() -> None:
    class Derived(nn.Module):
        a: int = 3

        def __post_init__(self) -> None:
            self.b = self.a * 2
            super().__post_init__()

    assert Derived().b == 6


def test_post_init_without_super_is_reported_at_init() -> None:
    class Broken(nn.Module):
        def __post_init__(self) -> None:
            pass

        def __call__(self) -> None:
            return None

    with pytest.raises(errors.IncorrectPostInitOverrideError, match=r"super\(\)\.__post_init__"):
        Broken().init(jax.random.key(0))


def test_init_on_the_class_is_an_error() -> None:
    with pytest.raises(errors.InvalidInstanceModuleError, match="instance of the Module class"):
        Scale.init(jax.random.key(0), jnp.ones((1, 2)))  # type: ignore[arg-type]


def test_numpy_scalars_in_numeric_fields_are_stored_as_python_numbers() -> None:
    class Layer(nn.Module):
        rate: float
        sizes: tuple[int, ...] = (1,)
        padding: "str | int" = "SAME"  # an annotation resolved on the first instance
        anything: Any = None

        def __call__(self, x: jax.Array) -> jax.Array:
            return x + self.rate  # a float32 result, as with a Python number

    new: Any = Layer  # the NumPy scalars are what a static checker refuses
    layer = new(np.int64(1), (np.int32(2), np.int32(3)), padding=np.int64(4))
    assert (layer.rate, layer.sizes, layer.padding) == (1, (2, 3), 4)
    assert [type(v) for v in (layer.rate, *layer.sizes, layer.padding)] == [int] * 4
    assert type(new(rate=np.float32(0.5)).rate) is float
    kept = np.float32(2.0)  # a field not annotated as a number keeps what it is given
    assert new(0.5, anything=kept).anything is kept
    assert type(new(np.bool_(True)).rate) is np.bool_  # booleans are not numbers here
    y = new(np.int64(1)).apply({}, jnp.ones(2))
    assert y.dtype == jnp.float32
    assert type(new(np.int64(1)).clone(rate=np.float32(3.0)).rate) is float


# ----------------------------------------------------------------------------- setup


def test_setup_runs_lazily_once_and_not_on_unbound_modules() -> None:
    calls: list[str] = []

    class Lazy(nn.Module):
        def setup(self) -> None:
            calls.append("setup")
            self.inner = Scale()

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.inner(self.inner(x))

        def helper(self) -> int:
            return 1

    assert Lazy().helper() == 1 and calls == []
    Lazy().init(jax.random.key(0), jnp.ones((1, 2)))
    assert calls == ["setup"]


def test_setup_attributes_of_unbound_modules_are_missing() -> None:
    class WithSetup(nn.Module):
        def setup(self) -> None:
            self.x = 1

        def read(self) -> int:
            return self.x

    with pytest.raises(AttributeError, match='"WithSetup" object has no attribute "x"'):
        WithSetup().read()


def test_modules_are_frozen_outside_setup() -> None:
    class Mutating(nn.Module):
        @nn.compact
        def __call__(self) -> None:
            self.value = 1

    with pytest.raises(errors.SetAttributeFrozenModuleError, match="Can't set value=1"):
        Mutating().init(jax.random.key(0))


def test_dataclass_attributes_cannot_be_set_in_setup() -> None:
    class SetsField(nn.Module):
        features: int = 1

        def setup(self) -> None:
            self.features = 2

        def __call__(self) -> None:
            return None

    with pytest.raises(errors.SetAttributeInModuleSetupError, match="attributes are frozen"):
        SetsField().init(jax.random.key(0))


def test_super_setup_and_super_compact() -> None:
    class Base(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return Scale(3)(x)

    class Derived(Base):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return Scale(1)(super().__call__(x))

    params = Derived().init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    assert sorted(params) == ["Scale_0", "Scale_1"]


# ----------------------------------------------------------------------------- unbound


def test_unbound_module_errors() -> None:
    with pytest.raises(errors.CallCompactUnboundModuleError, match="unbound modules"):
        Scale()(jnp.ones((1, 2)))

    class Probe(nn.Module):
        def rng(self) -> Any:
            return self.make_rng("x")

        def has(self) -> Any:
            return self.has_rng("x")

        def var(self) -> Any:
            return self.variables

        def mut(self) -> Any:
            return self.is_mutable_collection("x")

        def sow_it(self) -> Any:
            return self.sow("x", "y", 1)

        def initializing(self) -> Any:
            return self.is_initializing()

    with pytest.raises(ValueError, match="Can't use RNGs on unbound modules"):
        Probe().rng()
    with pytest.raises(ValueError, match="Can't query for RNGs on unbound modules"):
        Probe().has()
    with pytest.raises(ValueError, match="Can't access variables on unbound modules"):
        Probe().var()
    with pytest.raises(ValueError, match="Can't check mutability on unbound modules"):
        Probe().mut()
    with pytest.raises(ValueError, match="Can't store variables on unbound modules"):
        Probe().sow_it()
    with pytest.raises(ValueError, match="Can't check if running under init"):
        Probe().initializing()


def test_setup_of_unbound_module_and_unbind_of_unbound_module() -> None:
    class WithSetup(nn.Module):
        def setup(self) -> None:
            pass

    with pytest.raises(errors.CallSetupUnboundModuleError, match="unbound modules"):
        WithSetup().setup()
    with pytest.raises(errors.CallUnbindOnUnboundModuleError, match="unbind"):
        WithSetup().unbind()


def test_missing_method_message() -> None:
    class NoCall(nn.Module):
        pass

    with pytest.raises(AttributeError, match='"NoCall" object has no attribute "__call__"'):
        NoCall().init(jax.random.key(0))


# ----------------------------------------------------------------------------- identity


def test_hash_and_equality_of_unbound_modules() -> None:
    assert hash(Scale(2)) == hash(Scale(2)) and Scale(2) == Scale(2)
    assert Scale(2) != Scale(3)
    with pytest.raises(TypeError, match="Can't call __hash__ on modules that hold variables"):
        hash(Scale(parent=Scope({})))

    class Unhashable(nn.Module):
        table: Any = None

    with pytest.raises(TypeError, match="Failed to hash Flax Module"):
        hash(Unhashable(table=[1]))


def test_repr_lists_attributes_and_children_without_running_setup() -> None:
    class Net(nn.Module):
        act: Any = jax.nn.relu
        sizes: tuple[int, ...] = (2,)

        @nn.compact
        def __call__(self, x: jax.Array) -> str:
            Scale(2)(x)
            return repr(self)

    text, _ = Net().init_with_output(jax.random.key(0), jnp.ones((1, 2)))
    assert text == (
        "Net(\n    # attributes\n    act = relu\n    sizes = (2,)\n    # children\n"
        "    Scale_0 = Scale(\n        # attributes\n        features = 2\n    )\n)"
    )
    assert repr(Scale(3)) == "Scale(\n    # attributes\n    features = 3\n)"


def test_property_errors_become_descriptor_attribute_errors() -> None:
    class WithProp(nn.Module):
        @property
        def broken(self) -> Any:
            return self.missing  # type: ignore[attr-defined]

        @property
        def fine(self) -> int:
            return 3

        def __call__(self) -> Any:
            return self.fine, self.broken

    with pytest.raises(errors.DescriptorAttributeError, match="Trying to access a property"):
        WithProp().apply({})


# ----------------------------------------------------------------------------- interceptors


def test_interceptors_see_every_wrapped_call_in_lifo_order() -> None:
    class Identity(nn.Module):
        def __call__(self, x: Any) -> Any:
            return x

    log: list[tuple[str, str]] = []

    def logger(f: Any, args: Any, kwargs: Any, context: Any) -> Any:
        log.append((type(context.module).__name__, context.method_name))
        return f(*args, **kwargs)

    def plus_one(f: Any, args: Any, kwargs: Any, context: Any) -> Any:
        return f(*args, **kwargs) + 1

    def times_two(f: Any, args: Any, kwargs: Any, context: Any) -> Any:
        return f(*args, **kwargs) * 2

    with nn.intercept_methods(logger):
        Identity()(1)
    assert log == [("Identity", "__call__")]
    with nn.intercept_methods(plus_one), nn.intercept_methods(times_two):
        assert Identity()(3) == 7  # the innermost (last entered) runs closest to the call
    assert Identity()(3) == 3


def _name_stacks(fn: Any) -> str:
    jaxpr = jax.make_jaxpr(fn)()
    return " ".join(str(e.source_info.name_stack) for e in jaxpr.jaxpr.eqns)


def test_named_call_switches() -> None:
    # A fresh input shape per trace: JAX reuses cached traces of jnp functions.
    def run(n: int) -> Any:
        variables = {"params": {"w": jnp.ones((n, 2))}}
        return lambda: Scale(name="proj").apply(variables, jnp.ones((1, n)))

    try:
        nn.enable_named_call()
        assert "proj" in _name_stacks(run(3))
        with nn.override_named_call(False):
            assert "proj" not in _name_stacks(run(4))
        assert "proj" in _name_stacks(run(5))
        nn.disable_named_call()
        assert "proj" not in _name_stacks(run(6))
    finally:
        nn.enable_named_call()


def test_module_stack_is_per_thread() -> None:
    started = threading.Event()
    release = threading.Event()
    seen: list[Any] = []

    class Slow(nn.Module):
        @nn.compact
        def __call__(self) -> None:
            started.set()
            release.wait(5)

    worker = threading.Thread(target=lambda: Slow().init(jax.random.key(0)))
    worker.start()
    started.wait(5)
    seen.append(nn.module._context.module_stack[-1])  # this thread is at top level
    release.set()
    worker.join()
    assert seen == [None]
