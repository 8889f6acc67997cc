"""Compile a treedef into a plain Python function that builds the tree from its leaves.

``jax.tree_util.tree_unflatten`` rebuilds a dataclass node by calling its class with
every field as a keyword argument, which for a Module goes through the metaclass and
costs about a microsecond per node. ``jit`` rebuilds its output tree on every call, so for
each output treedef it compiles (once, when the function is traced) one function whose
body is straight-line code: modules are made with ``object.__new__`` and their field
dict (assigned whole), variables by setting their slot (one statement each, no call per node),
dicts/tuples/lists/named tuples by their literals, static leaves as constants. Node
types it does not know are delegated to ``tree_unflatten`` for that subtree, so the
result is always exactly what ``tree_unflatten`` would give.
"""

import collections
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.tree_util as jtu

from ._module import Module, _ModuleMeta
from ._variables import Variable

_new = object.__new__
_set_value = Variable.__dict__["value"].__set__
# ``obj.__dict__ = d`` without the attribute lookup: one dict per module, no copy.
_set_dict = Module.__dict__["__dict__"].__set__
_tuple_new: Any = tuple.__new__
_drain = collections.deque(maxlen=0).extend  # runs an iterator to its end, in C
_BATCH = 16


def _is_namedtuple(typ: type) -> bool:
    return issubclass(typ, tuple) and hasattr(typ, "_fields") and typ.__new__ is not tuple.__new__


def _generated_new(typ: type) -> bool:
    """Whether ``typ.__new__`` is the one ``collections.namedtuple`` writes, which only
    calls ``tuple.__new__(typ, fields)``."""
    new = typ.__new__
    module = getattr(new, "__globals__", {}).get("__name__", "")
    return isinstance(module, str) and module.startswith("namedtuple_")


class _Emitter:
    """Turns a treedef into straight-line code. Variables holding one leaf and modules are
    made in batches (one ``map`` over their classes, one over their contents), so the
    per-node work runs in C; every other node is an expression."""

    def __init__(self, static: Mapping[int, Any]):
        self.static = static
        self.consts: list[Any] = []
        self.lines: list[str] = []  # statements for nodes that cannot be batched
        self.var_classes: list[Any] = []
        self.var_values: list[str] = []
        self.mod_classes: list[Any] = []
        self.mod_dicts: list[str] = []
        self.leaf = 0  # position among all leaves
        self.dyn = 0  # position among dynamic (non-static) leaves

    def temp(self) -> str:
        return f"t{len(self.lines)}"

    def const(self, value: Any) -> str:
        self.consts.append(value)
        return f"c{len(self.consts) - 1}"

    def leaf_expr(self) -> str:
        pos = self.leaf
        self.leaf += 1
        if pos in self.static:
            return self.const(self.static[pos])
        self.dyn += 1
        return f"a{self.dyn - 1}"

    def emit(self, treedef: Any) -> str:
        data = treedef.node_data()
        if data is None:
            return self.leaf_expr()
        typ, aux = data
        children = treedef.children()
        if typ is type(None):
            return "None"
        if typ is tuple:
            return "(" + "".join(f"{self.emit(c)}, " for c in children) + ")"
        if typ is list:
            return "[" + ", ".join(self.emit(c) for c in children) + "]"
        if typ is dict:
            items = (f"{self.const(k)}: {self.emit(c)}" for k, c in zip(aux, children))
            return "{" + ", ".join(items) + "}"
        if isinstance(typ, _ModuleMeta) and hasattr(typ, "_pytreemod_data_fields"):
            index = len(self.mod_classes)
            self.mod_classes.append(typ)
            self.mod_dicts.append("")  # filled below: children are numbered after it
            fields = typ._pytreemod_data_fields  # type: ignore[attr-defined]
            items = [f"{f!r}: {self.emit(c)}" for f, c in zip(fields, children)]
            statics = typ._pytreemod_static  # type: ignore[attr-defined]
            items += [f"{f!r}: {self.const(v)}" for f, v in zip(statics, aux)]
            self.mod_dicts[index] = "{" + ", ".join(items) + "}"
            return f"m{index}"
        if isinstance(typ, type) and issubclass(typ, Variable) and len(children) == 1:
            if children[0].node_data() is None:
                name = f"v{len(self.var_classes)}"
                self.var_classes.append(typ)
                self.var_values.append(self.leaf_expr())
                return name
            value = self.emit(children[0])
            name = self.temp()
            self.lines.append(f"{name} = _new({self.const(typ)}); _set_value({name}, {value})")
            return name
        if isinstance(typ, type) and _is_namedtuple(typ):
            if not children and _generated_new(typ):
                # Immutable and empty (an optimizer's EmptyState): one instance serves
                # every call.
                return self.const(_tuple_new(typ, ()))
            items = "".join(f"{self.emit(c)}, " for c in children)
            if _generated_new(typ):  # skip the Python-level __new__: same result
                return f"_tuple_new({self.const(typ)}, ({items}))"
            return f"{self.const(typ)}({items})"
        # Anything else: let JAX build this subtree from its leaves.
        leaves = [self.leaf_expr() for _ in range(treedef.num_leaves)]
        return (
            f"{self.const(functools.partial(jtu.tree_unflatten, treedef))}([{', '.join(leaves)}])"
        )

    def body(self, expr: str) -> list[str]:
        """The statements of ``build``, ending with the return."""
        out = []
        if self.dyn:
            out.append(f"{''.join(f'a{i}, ' for i in range(self.dyn))}= a")
        # A batch costs a few calls up front and saves a bytecode call per node: worth it
        # from about sixteen nodes on.
        nv, nm = len(self.var_classes), len(self.mod_classes)
        if nv >= _BATCH:
            names = "".join(f"v{i}, " for i in range(nv))
            out.append(f"{names}= vs = tuple(map(_new, {self.const(tuple(self.var_classes))}))")
            values = "".join(f"{v}, " for v in self.var_values)
            out.append(f"_drain(map(_set_value, vs, ({values})))")
        else:
            for i, (cls, value) in enumerate(zip(self.var_classes, self.var_values)):
                out.append(f"v{i} = _new({self.const(cls)}); _set_value(v{i}, {value})")
        if nm >= _BATCH:
            names = "".join(f"m{i}, " for i in range(nm))
            out.append(f"{names}= ms = tuple(map(_new, {self.const(tuple(self.mod_classes))}))")
        else:
            out += [f"m{i} = _new({self.const(cls)})" for i, cls in enumerate(self.mod_classes)]
        out += self.lines
        if nm >= _BATCH:
            dicts = "".join(f"{d}, " for d in self.mod_dicts)
            out.append(f"_drain(map(_set_dict, ms, ({dicts})))")
        else:
            out += [f"_set_dict(m{i}, {d})" for i, d in enumerate(self.mod_dicts)]
        out.append(f"return {expr}")
        return out


def compile_unflatten(
    treedef: Any, static: Mapping[int, Any] | None = None
) -> Callable[[Sequence[Any]], Any]:
    """A function ``build(arrays)`` equal to ``tree_unflatten(treedef, leaves)``.

    ``static`` maps leaf positions to constant values; ``arrays`` then holds only the
    other leaves, in order.
    """
    static = dict(static or {})
    emitter = _Emitter(static)
    try:
        expr = emitter.emit(treedef)
        body = emitter.body(expr)
        # Constants are closure cells of a factory, so every use is a single fast load.
        consts = "".join(f", c{i}" for i in range(len(emitter.consts)))
        source = (
            f"def factory(_new, _set_value, _set_dict, _drain, _tuple_new{consts}):\n"
            "    def build(a):\n"
            + "".join(f"        {line}\n" for line in body)
            + "    return build\n"
        )
        namespace: dict[str, Any] = {}
        exec(source, namespace)
        return namespace["factory"](
            _new, _set_value, _set_dict, _drain, tuple.__new__, *emitter.consts
        )
    except (SyntaxError, RecursionError, MemoryError):  # pathologically deep trees
        positions = [i for i in range(treedef.num_leaves) if i not in static]

        def build(arrays: Sequence[Any]) -> Any:
            leaves = [static.get(i) for i in range(treedef.num_leaves)]
            for pos, x in zip(positions, arrays):
                leaves[pos] = x
            return jtu.tree_unflatten(treedef, leaves)

        return build
