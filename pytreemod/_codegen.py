"""Compile a treedef into a plain Python function that builds the tree from its leaves.

``jax.tree_util.tree_unflatten`` rebuilds a dataclass node by calling its class with
every field as a keyword argument, which for a Module goes through the metaclass and
costs about a microsecond per node. ``jit`` rebuilds its output tree on every call, so for
each output treedef it compiles (once, when the function is traced) one function whose
body is straight-line code: modules are made with ``object.__new__`` and their field
dict, variables by setting their slot (one statement each, no call per node),
dicts/tuples/lists/named tuples by their literals, static leaves as constants. Node
types it does not know are delegated to ``tree_unflatten`` for that subtree, so the
result is always exactly what ``tree_unflatten`` would give.
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.tree_util as jtu

from ._module import _ModuleMeta
from ._variables import Variable

_new = object.__new__
_set_value = Variable.__dict__["value"].__set__


def _is_namedtuple(typ: type) -> bool:
    return issubclass(typ, tuple) and hasattr(typ, "_fields") and typ.__new__ is not tuple.__new__


class _Emitter:
    """Emits one statement per module or variable (no Python call per node) and returns
    an expression for every other node."""

    def __init__(self, static: Mapping[int, Any]):
        self.static = static
        self.consts: list[Any] = []
        self.lines: list[str] = []
        self.leaf = 0  # position among all leaves
        self.dyn = 0  # position among dynamic (non-static) leaves

    def temp(self) -> str:
        return f"t{len(self.lines)}"

    def const(self, value: Any) -> str:
        self.consts.append(value)
        return f"_c[{len(self.consts) - 1}]"

    def leaf_expr(self) -> str:
        pos = self.leaf
        self.leaf += 1
        if pos in self.static:
            return self.const(self.static[pos])
        self.dyn += 1
        return f"a[{self.dyn - 1}]"

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
            names = typ._pytreemod_data_fields  # type: ignore[attr-defined]
            items = [f"{name!r}: {self.emit(c)}" for name, c in zip(names, children)]
            statics = typ._pytreemod_static  # type: ignore[attr-defined]
            items += [f"{name!r}: {self.const(v)}" for name, v in zip(statics, aux)]
            name = self.temp()
            cls = self.const(typ)
            self.lines.append(
                f"{name} = _new({cls}); {name}.__dict__.update({{{', '.join(items)}}})"
            )
            return name
        if isinstance(typ, type) and issubclass(typ, Variable) and len(children) == 1:
            value = self.emit(children[0])
            name = self.temp()
            self.lines.append(f"{name} = _new({self.const(typ)}); _set_value({name}, {value})")
            return name
        if isinstance(typ, type) and _is_namedtuple(typ):
            return f"{self.const(typ)}({', '.join(self.emit(c) for c in children)})"
        # Anything else: let JAX build this subtree from its leaves.
        leaves = [self.leaf_expr() for _ in range(treedef.num_leaves)]
        return (
            f"{self.const(functools.partial(jtu.tree_unflatten, treedef))}([{', '.join(leaves)}])"
        )


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
        namespace: dict[str, Any] = {
            "_c": emitter.consts,
            "_new": _new,
            "_set_value": _set_value,
        }
        body = "".join(f"    {line}\n" for line in emitter.lines)
        exec(f"def build(a):\n{body}    return {expr}\n", namespace)
        return namespace["build"]
    except (SyntaxError, RecursionError, MemoryError):  # pathologically deep trees
        positions = [i for i in range(treedef.num_leaves) if i not in static]

        def build(arrays: Sequence[Any]) -> Any:
            leaves = [static.get(i) for i in range(treedef.num_leaves)]
            for pos, x in zip(positions, arrays):
                leaves[pos] = x
            return jtu.tree_unflatten(treedef, leaves)

        return build
