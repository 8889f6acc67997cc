"""adapters.nnx Pytree/Module/helpers: Flax 0.12's data-vs-static attribute rules, the
Module conveniences (sow, capture, set_attributes, view...) and List/Dict/Sequential."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import optax
import pytest

from adapters import nnx
from adapters.errors import TraceContextError


class Box(nnx.Pytree):
    def __init__(self, x, label="box"):
        self.x = nnx.Param(x)
        self.arr = jnp.ones(2)
        self.label = label


def test_pytree_attributes_are_data_or_static():
    b = Box(jnp.zeros(3))
    leaves = jax.tree.leaves(b)
    assert len(leaves) == 2  # the Param's value and the raw array; the label is static
    b2 = jax.tree.map(lambda v: v + 1, b)
    assert isinstance(b2, Box) and b2.label == "box" and float(b2.arr[0]) == 2.0
    assert nnx.is_data(b.x) and nnx.is_data(b) and not nnx.is_data([jnp.ones(1)])
    assert nnx.has_data([1, jnp.ones(1)]) and not nnx.has_data(["a", 1])


def test_static_attribute_holding_data_is_refused():
    class Holder(nnx.Pytree):
        def __init__(self):
            self.items = [nnx.Param(jnp.ones(1))]  # a plain list: static

    with pytest.raises(
        ValueError, match=r"Found data on value of type .* static attribute 'items'"
    ):
        Holder()

    class Explicit(nnx.Pytree):
        def __init__(self):
            self.items = nnx.data([nnx.Param(jnp.ones(1))])
            self.name = nnx.static("n")

    e = Explicit()
    assert len(jax.tree.leaves(e)) == 1
    with pytest.raises(ValueError, match=r"annotated with nnx\.static"):
        e.other = nnx.static([jnp.ones(1)])
    with pytest.raises(ValueError, match="Cannot assign data value of type"):
        e.name = jnp.ones(1)
    with pytest.raises(ValueError, match="Found unexpected tags"):
        e.bad = [nnx.data(1)]
    e.name = nnx.data(jnp.ones(1))  # an explicit override is allowed
    assert len(jax.tree.leaves(e)) == 2


def test_unexpected_data_after_init_and_check_pytree():
    class Late(nnx.Pytree):
        def __init__(self):
            self.items = []

    late = Late()
    late.items.append(jnp.ones(1))
    with pytest.raises(ValueError, match="Found unexpected data on value"):
        nnx.check_pytree(late)
    with pytest.raises(TypeError, match="Expected a Pytree"):
        nnx.check_pytree(1)


def test_class_annotations_and_dataclass():
    @nnx.dataclass
    class Point(nnx.Pytree):
        xy: jax.Array = nnx.data()
        name: str = nnx.static(default="p")

    p = Point(jnp.ones(2))
    assert len(jax.tree.leaves(p)) == 1 and p.name == "p"
    with pytest.raises(ValueError, match="Conflicting pytree annotation"):

        class Bad(Point):
            xy: jax.Array = nnx.static()

    with pytest.raises(ValueError, match="Invalid 'static' metadata"):

        class Bad2(nnx.Pytree):
            y: int = dataclasses.field(metadata={"static": 1})

    with pytest.raises(TypeError, match="accepts either a single positional argument"):
        nnx.data(1, default=2)
    with pytest.raises(ValueError, match="Cannot use 'static' key in metadata"):
        nnx.static(metadata={"static": True})


def test_registered_data_types_and_class_options():
    @nnx.register_data_type
    @dataclasses.dataclass(frozen=True)
    class Token:
        v: int

    class Holder(nnx.Pytree):
        def __init__(self):
            self.t = Token(1)

    assert jax.tree.leaves(Holder()) == [Token(1)]
    with pytest.raises(TypeError, match="does not support __slots__"):

        class Slotted(nnx.Pytree):
            __slots__ = ("a",)

    with pytest.raises(ValueError, match="Object is not a pytree"):

        class NotObject(nnx.Object, pytree=True):
            pass

    class Plain(nnx.Object):
        def __init__(self):
            self.items = [nnx.Param(jnp.ones(1))]  # no data rules when not a pytree

    plain = Plain()
    assert jax.tree.leaves(plain) == [plain]
    assert len(nnx.state(plain)["items"]) == 1


def test_mutation_from_another_trace_is_refused():
    b = Box(jnp.zeros(1))

    @jax.jit
    def f(x):
        b.label = "changed"
        return x

    with pytest.raises(TraceContextError, match="Cannot mutate 'Box' from different trace level"):
        f(1.0)


class Sower(nnx.Module):
    def __call__(self, x):
        self.sow(nnx.Intermediate, "h", x * 2)
        return self.perturb("p", x) * 3


def test_capture_sow_and_perturb():
    m = Sower()
    x = jnp.ones(2)
    _, inter = nnx.capture(m, nnx.Intermediate)(x)
    assert jnp.allclose(inter["h"].get_value()[0], 2 * x)
    _, perts = nnx.capture(m, nnx.Perturbation)(x)

    def loss(perts):
        out, _ = nnx.capture(m, nnx.Intermediate, init=perts)(x)
        return out.sum()

    assert jnp.allclose(loss(perts), 6.0)  # zeros at first: 3 * x
    seeded = jax.tree.map(jnp.ones_like, perts)
    assert jnp.allclose(loss(seeded), 12.0)  # the perturbation is added to x
    _, by_method = nnx.capture(m, nnx.Intermediate, method_outputs=nnx.Intermediate)(x)
    assert "__call__" in by_method and "__call__" not in vars(Sower)["__call__"].__dict__


def test_sow_outside_capture_is_deprecated_and_checked():
    m = Sower()
    with pytest.warns(DeprecationWarning, match="outside of 'nnx.capture"):
        m(jnp.ones(1))
    assert isinstance(m.h, nnx.Intermediate)
    m.q = 1
    with pytest.raises(ValueError, match="Expected 'q' to be a Variable, got int"):
        m.sow(nnx.Intermediate, "q", 1)
    with pytest.raises(ValueError, match="Expected 'h' to be of type 'BatchStat'"):
        m.sow(nnx.BatchStat, "h", 1)


class Block(nnx.Module):
    def __init__(self):
        self.drop = nnx.Dropout(0.5, deterministic=False)
        self.children = nnx.List([nnx.Dropout(0.1)])


def test_set_attributes_train_eval_and_iter_modules():
    b = Block()
    b.eval()
    assert b.drop.deterministic and b.children[0].deterministic
    b.set_attributes(nnx.Dropout, deterministic=False)
    assert not b.drop.deterministic
    with pytest.raises(ValueError, match=r"following attributes: \['missing'\]"):
        b.set_attributes(missing=1)
    paths = [p for p, _ in nnx.iter_modules(b)]
    assert paths == [("children", 0), ("children",), ("drop",), ()]
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert [k for k, _ in b.iter_children()] == ["children", "drop"]


def test_view_with_attributes_and_view_info():
    b = Block()
    v = nnx.view(b, deterministic=True)
    assert v.drop.deterministic and not b.drop.deterministic
    with pytest.raises(ValueError, match=r"Unused keys found in nnx.view: \['nope'\]"):
        nnx.view(b, nope=1)
    w = nnx.with_attributes(b, only=nnx.Dropout, rate=0.9)
    assert w.drop.rate == 0.9 and b.drop.rate == 0.5
    with pytest.raises(ValueError, match="Could not find at least one instance"):
        nnx.with_attributes(b, nope=1)
    assert nnx.view_info(b).startswith("Dropout:\n  deterministic:")


def test_list_and_dict_are_graph_nodes():
    lst = nnx.List([nnx.Param(jnp.ones(1)), nnx.Param(jnp.ones(1))])
    lst.append(nnx.Param(jnp.zeros(1)))
    lst.insert(0, nnx.Param(jnp.full(1, 5.0)))
    assert len(lst) == 4 and lst[-1][...] == 0 and lst[0][...] == 5
    assert sorted(nnx.state(lst).keys()) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="Cannot assign data value"):
        nnx.List([1, 2])[0] = nnx.Param(jnp.ones(1))  # position 0 is static (as in Flax)
    with pytest.raises(IndexError, match="Index out of bounds"):
        lst[10]
    with pytest.raises(TypeError, match="Invalid index type"):
        lst["a"]
    d = nnx.Dict(a=nnx.Param(jnp.ones(1)), b="static")
    d["c"] = jnp.ones(2)
    assert set(d) == {"a", "b", "c"} and len(jax.tree.leaves(d)) == 2
    with pytest.raises(KeyError):
        d["missing"]
    g, s = nnx.split(d)
    assert nnx.merge(g, s)["b"] == "static"


def test_sequential_and_train_state():
    seq = nnx.Sequential(lambda x: (x, x + 1), lambda a, b: a * b)
    assert float(seq(jnp.array(2.0))) == 6.0
    assert nnx.Sequential()(5) == 5
    with pytest.raises(TypeError, match=r"Sequence\[0\] is not callable"):
        nnx.Sequential(1)(1)

    class Lin(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones((2, 1)))

        def __call__(self, x):
            return x @ self.w[...]

    graphdef, params = nnx.split(Lin())
    ts = nnx.TrainState.create(graphdef, params=params, tx=optax.sgd(0.1))
    y, _ = ts.apply("params")(jnp.ones((1, 2)))
    assert y.shape == (1, 1)
    grads = jax.tree.map(jnp.ones_like, ts.params)
    ts2 = ts.apply_gradients(grads)
    assert int(ts2.step) == 1
    with pytest.raises(TypeError, match="to be a State"):
        ts.apply("step")


def test_repr_reports_sizes():
    text = repr(Box(jnp.zeros(3)))
    assert text.startswith("Box( # Param: 3 (12 B)") and "label='box'" in text


def test_container_error_messages():
    lst = nnx.List([1, 2])
    with pytest.raises(TypeError, match="Expected an iterable"):
        lst[0:1] = 3
    with pytest.raises(ValueError, match="Length mismatch"):
        lst[0:2] = [1]
    with pytest.raises(KeyError, match="Invalid key"):
        lst._graph_node_set_key("a", 1)
    del lst[0]
    assert list(lst) == [2]
    d = nnx.Dict(a=1)
    with pytest.raises(KeyError):
        del d["b"]
    m = Sower()
    with pytest.warns(DeprecationWarning):
        m.perturb("p", jnp.ones(1))
    with pytest.raises(ValueError, match="Expected 'p' to be of type 'BatchStat'"):
        m.perturb("p", jnp.ones(1), variable_type=nnx.BatchStat)
