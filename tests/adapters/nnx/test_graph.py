"""adapters.nnx.graphlib: split/merge, GraphDef structure, contexts, traversals.

Real flax.nnx is the oracle where the structure itself is the behaviour (GraphDef node
kinds, iter_graph order)."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx as fnnx

from adapters import nnx
from adapters.nnx import graphlib


def _classes(lib):
    class Block(lib.Module):
        def __init__(self):
            self.w = lib.Param(jnp.ones((2, 3)))
            self.count = lib.BatchStat(jnp.zeros(()))
            self.name = "block"

    class Model(lib.Module):
        def __init__(self):
            self.a = Block()
            self.b = self.a  # a shared submodule
            self.layers = lib.List([Block(), Block()])
            self.tied = self.layers[0].w  # a shared Variable

    return Model


_MODELS = {nnx: _classes(nnx), fnnx: _classes(fnnx)}


def _pair(lib):
    return _MODELS[lib]()


class Lin(nnx.Module):
    """A small layer without Rngs (cheap to build)."""

    def __init__(self, din, dout):
        self.kernel = nnx.Param(jnp.ones((din, dout)))
        self.bias = nnx.Param(jnp.zeros((dout,)))

    def __call__(self, x):
        return x @ self.kernel[...] + self.bias[...][None]


def _kinds(graphdef):
    return [type(n).__name__ for n in graphdef.nodes]


def test_graphdef_structure_matches_flax():
    ours, theirs = _pair(nnx), _pair(fnnx)
    g1, s1 = nnx.split(ours)
    g2, s2 = fnnx.split(theirs)
    assert _kinds(g1) == _kinds(g2)
    assert [k for k, _ in g1.attributes] == [k for k, _ in g2.attributes]
    assert g1.num_leaves == g2.num_leaves == 6
    assert [p for p, _ in nnx.to_flat_state(s1)] == [p for p, _ in fnnx.to_flat_state(s2)]
    assert hash(g1) == hash(nnx.graphdef(_pair(nnx))) and g1 == nnx.graphdef(_pair(nnx))


def test_merge_restores_sharing_and_cycles():
    m = _pair(nnx)
    m.layers[1].parent = m  # a cycle
    graphdef, state = nnx.split(m)
    m2 = nnx.merge(graphdef, state)
    assert m2.a is m2.b and m2.tied is m2.layers[0].w and m2.layers[1].parent is m2
    assert m2.a.w is m.a.w  # merge shares the Variables of the state by default
    m3 = nnx.merge(graphdef, state, copy=True)
    assert m3.a.w is not m.a.w and m3.tied is m3.layers[0].w


def test_split_with_filters_and_state():
    m = _pair(nnx)
    _, params, stats = nnx.split(m, nnx.Param, nnx.BatchStat)
    assert len(nnx.to_flat_state(params)) == 3 and len(nnx.to_flat_state(stats)) == 3
    with pytest.raises(ValueError, match="Non-exhaustive filters"):
        nnx.split(m, nnx.Param)
    only = nnx.state(m, nnx.BatchStat)
    assert all(isinstance(v, nnx.BatchStat) for _, v in nnx.to_flat_state(only))
    assert nnx.state(m)["a"]["w"] is m.a.w  # state holds the Variables themselves


def test_tree_mode_refuses_shared_variables():
    m = _pair(nnx)
    with pytest.raises(ValueError, match="Duplicate"):
        nnx.split(m, graph=False)
    lin = Lin(2, 3)
    graphdef, state = nnx.split(lin, graph=False)
    assert isinstance(graphdef.nodes[0], graphlib.TreeNodeDef)
    assert nnx.merge(graphdef, state).kernel is lin.kernel
    with nnx.set_graph_mode(False):
        assert isinstance(nnx.graphdef(lin).nodes[0], graphlib.TreeNodeDef)
    assert isinstance(nnx.graphdef(lin).nodes[0], graphlib.NodeDef)


def test_update_pop_and_clone():
    m = _pair(nnx)
    w = m.a.w
    new = jax.tree.map(lambda x: x + 1, nnx.state(m))
    nnx.update(m, new)
    assert m.a.w is w and float(w[0, 0]) == 2.0
    popped = nnx.pop(m, nnx.BatchStat)
    assert len(nnx.to_flat_state(popped)) == 3 and not hasattr(m.a, "count")
    c = nnx.clone(m)
    assert c.a.w is not m.a.w and c.a is c.b
    with pytest.raises(ValueError, match="If arrays is True"):
        nnx.clone(m, variables=False, arrays=True)
    with pytest.raises(ValueError, match="Expected at least one filter"):
        nnx.pop(m)
    with pytest.raises(ValueError, match="Cannot set key"):
        nnx.update((jnp.ones(1),), {1: jnp.ones(1)})


def test_merge_errors():
    graphdef, state = nnx.split(Lin(2, 3))
    with pytest.raises(TypeError, match="Expected a GraphDef or GraphState"):
        nnx.merge(state, state)
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        nnx.merge(graphdef)
    with pytest.raises(ValueError, match="Incorrect number of leaves"):
        nnx.merge(graphdef, nnx.State({}))
    g2, s2 = nnx.split(nnx.Dict(kernel=nnx.Param(jnp.ones(1)), bias=nnx.Param(jnp.ones(1))))
    with pytest.raises(ValueError, match="GraphDef must be the same"):
        nnx.merge(nnx.graphlib.GraphState(graphdef, state), nnx.graphlib.GraphState(g2, s2))


def test_unpack_graph_state_round_trip():
    lin = Lin(2, 3)
    gs = nnx.unpack(lin)
    assert isinstance(gs, nnx.GraphState) and gs.kernel is lin.kernel
    doubled = jax.tree.map(lambda x: x * 2, gs)
    assert isinstance(doubled, nnx.GraphState)
    lin2 = nnx.merge(doubled)
    assert jnp.allclose(lin2.kernel[...], 2 * lin.kernel[...])


def test_iter_graph_order_matches_flax():
    ours = [(p, type(v).__name__) for p, v in nnx.iter_graph(_pair(nnx))]
    theirs = [(p, type(v).__name__) for p, v in fnnx.iter_graph(_pair(fnnx))]
    assert ours == theirs


def test_split_and_merge_contexts_share_references():
    lin = Lin(2, 3)
    with nnx.split_context() as ctx:
        g1, s1 = ctx.split(lin)
        g2, _ = ctx.split(lin)
    assert isinstance(g2.nodes[0], graphlib.NodeRef) and not hasattr(ctx, "ref_index")
    with nnx.merge_context() as mctx:
        a = mctx.merge(g1, s1)
        b = mctx.merge(g2, nnx.State({}))
    assert a is b and a is not lin


def test_update_context_writes_results_back_into_the_callers_objects():
    class Counter(nnx.Module):
        def __init__(self):
            self.n = nnx.BatchStat(jnp.zeros(()))

    m1 = Counter()
    with nnx.update_context("t"):
        with nnx.split_context("t") as ctx:
            graphdef, state = ctx.split(m1)

        @jax.jit
        def f(graphdef, state):
            with nnx.merge_context("t", True) as ctx:
                m = ctx.merge(graphdef, state)
            m.n[...] += 1
            m.extra = 7  # a new static attribute
            m.me = m  # a new cycle
            with nnx.split_context("t") as ctx:
                return ctx.split(m)

        graphdef_out, state_out = f(graphdef, state)
        with nnx.merge_context("t", False) as ctx:
            m3 = ctx.merge(graphdef_out, state_out)
    assert m3 is m1 and m1.extra == 7 and m1.me is m1 and float(m1.n[...]) == 1.0
    with pytest.raises(ValueError, match="No update context found for tag 't'"):
        nnx.current_update_context("t")
    with pytest.raises(ValueError, match="inner_merge must be specified"):
        with nnx.update_context("u"), nnx.merge_context("u"):
            pass


def test_recursive_map_find_duplicates_and_with_vars():
    m = _pair(nnx)
    assert [("a",), ("b",)] in nnx.find_duplicates(m)

    def double(path, node):
        return node.replace(node[...] * 2) if isinstance(node, nnx.Param) else node

    m2 = nnx.recursive_map(double, m)
    # As in Flax: the map works on a clone sharing the Variables, and a returned Variable
    # is written into the one it replaces.
    assert m2 is not m and m2.a.w is m.a.w and float(m.a.w[0, 0]) == 2.0
    cyc = nnx.List([])
    cyc.append(cyc)
    with pytest.raises(ValueError, match="Found cycle in the graph"):
        nnx.recursive_map(lambda p, n: nnx.List([]) if p else n, cyc)
    with pytest.raises(ValueError, match="Found duplicate at paths"):
        nnx.with_vars(m, ref=True)
    pure = nnx.as_pure(nnx.state(Lin(2, 3)))
    assert isinstance(pure["kernel"], jax.Array)


def test_registries_and_iter_children_errors():
    with pytest.raises(ValueError, match="is already registered"):
        graphlib.register_pytree_node_type(dict, lambda x: ([], None), lambda n, a: {})
    with pytest.raises(ValueError, match="Expected a graph node, got int"):
        list(nnx.iter_children(1))
    with pytest.raises(ValueError, match="Expected a pytree node, got int"):
        list(nnx.iter_children(1, graph=False))
    lin = Lin(2, 3)
    assert [k for k, _ in nnx.iter_children(lin)] == ["bias", "kernel"]


def test_cached_partial_needs_graph_mode_and_call_proxy():
    with pytest.raises(ValueError, match="cached_partial is a graph-mode-only API"):
        nnx.cached_partial(lambda m: m, Lin(1, 1), graph=False)
    lin = Lin(2, 3)
    y, (graphdef, _) = nnx.call(nnx.split(lin))(jnp.ones((1, 2)))
    assert y.shape == (1, 3) and graphdef == nnx.graphdef(lin)
    y2, _ = nnx.graphdef(lin).apply(nnx.state(lin))(jnp.ones((1, 2)))
    assert jnp.allclose(y, y2)


def test_array_refs_cross_a_transform_as_no_update_or_new_output():
    m1 = nnx.with_vars(Lin(1, 1), ref=True)
    assert nnx.graphlib.is_array_ref(m1.kernel.get_raw_value())
    with nnx.update_context("refs"):
        with nnx.split_context("refs") as ctx:
            graphdef, leaves = ctx.flatten(m1, with_paths=False)

        @jax.jit
        def f(graphdef, leaves):
            with nnx.merge_context("refs", True) as ctx:
                m = ctx.unflatten(graphdef, leaves)
            m.kernel[...] += 1
            m.new = nnx.with_vars(Lin(1, 1), ref=True)
            with nnx.split_context("refs") as ctx:
                return ctx.flatten(m, with_paths=False)

        graphdef_out, leaves_out = f(graphdef, leaves)
        kinds = [type(x).__name__ for x in leaves_out]
        assert kinds == ["NoUpdate", "NoUpdate", "ArrayRefOutput", "ArrayRefOutput"]
        with nnx.merge_context("refs", False) as ctx:
            m3 = ctx.unflatten(graphdef_out, leaves_out)
    assert m3 is m1 and float(m1.kernel[...][0, 0]) == 2.0
    assert nnx.graphlib.is_array_ref(m1.new.kernel.get_raw_value())


def test_error_messages_of_the_graph_api():
    lin = Lin(2, 3)
    graphdef, state = nnx.split(lin)
    with pytest.raises(ValueError, match="Cannot use filters with with_paths=False"):
        with nnx.split_context() as ctx:
            ctx.flatten(lin, nnx.Param, with_paths=False)
    with pytest.raises(ValueError, match="Cannot use multiple flat_states when flat_state"):
        with nnx.merge_context() as mctx:
            mctx.unflatten(graphdef, [], nnx.to_flat_state(state))
    with pytest.raises(ValueError, match="Only one state can be passed as a list"):
        nnx.merge(graphdef, [], [])
    with pytest.raises(ValueError, match="Unsupported state type"):
        graphlib.unflatten(graphdef, 1)
    with pytest.raises(ValueError, match="Expected GraphState object"):
        nnx.merge(nnx.unpack(lin), state)
    with pytest.raises(ValueError, match="Expected a State object, got dict"):
        nnx.GraphState(graphdef, {})  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="Expected exactly one non-empty state"):
        nnx.update(lin.kernel, nnx.State({}), nnx.State({}))
    with pytest.raises(ValueError, match="Expected a subgraph for 'kernel'"):
        nnx.update(nnx.Dict(kernel=nnx.Dict()), {"kernel": jnp.ones(1)})
    with pytest.raises(ValueError, match="Cannot pop key 0 from node of type tuple"):
        nnx.pop((lin.kernel,), nnx.Param)
    a: list = [1]
    a.append([a])  # a cycle of two lists
    with pytest.raises(ValueError, match="Cycle detected for list"):
        list(nnx.iter_graph(a, graph=False))
    with pytest.raises(ValueError, match="Duplicate"):
        nnx.recursive_map(lambda p, x: x, [lin.kernel, lin.kernel], graph=False)

    class Plain(nnx.Object):
        pass

    with pytest.raises(ValueError, match="with graph=False on a 'Plain' instance"):
        nnx.split(Plain(), graph=False)
