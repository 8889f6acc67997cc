"""How ``jit`` recognises arguments without walking them: generated tests (``_Pattern``)
learned from a checked call, and the previous output's modules (``_Last``), each kept
with its arrays so that a recognised module is never flattened.

See "fast path" in ``_jit``'s docstring. Entries (``_jit._Entry``) are passed in: this
module reads their ``jitted`` function and the slices of their kept arrays (``kept``).
"""

import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax.tree_util as jtu

from ._codegen import _is_namedtuple
from ._jit_containers import NAMES, TooLarge, is_pure
from ._jit_containers import conds as pure_conds
from ._module import BoundMethod, Module

_flatten = jtu.tree_flatten
_leaves = jtu.tree_leaves
# Array types met so far (shared with ``_jit``'s check of a call's leaves).
_ARRAY_TYPES: set[type] = set()


# Nodes recognised by identity: immutable, and weakly referenced, so that recognising an
# argument never keeps it (and its device memory) alive. Tuples, lists and dicts around
# them are checked by structure on every call.
_WEAK_TYPES = (Module, BoundMethod)


class _Ref(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a module that a pattern's check saw, with the module's arrays
    in the order flattening gives them (``leaves``): a call passing the module sends
    these to the compiled function, without flattening the module. Arrays the module
    holds anyway; when the module is freed, ``_forget`` lets go of them too."""

    __slots__ = ("leaves",)
    leaves: "Sequence[Any]"


def _forget(ref: _Ref) -> None:
    ref.leaves = ()


class _Last:
    """The latest output of a wrapper, as far as the next call may pass parts of it back:
    weak references to its modules (``items``), their arrays (``arrays``, in the order of
    ``entry.kept``) and the entry that built it (``entry``). When one of the modules is
    freed, ``drop`` lets go of the arrays and of the entry, so nothing is held for a
    module the caller let go of."""

    __slots__ = ("arrays", "drop", "entry", "items")

    def __init__(self) -> None:
        self.items: tuple[weakref.ref[Any], ...] = ()
        self.arrays: Sequence[Any] = ()
        self.entry: Any = None  # the _jit._Entry that built it
        self.drop = self.forget

    def forget(self, _ref: Any = None) -> None:
        self.items, self.arrays, self.entry = (), (), None


_MISS = object()  # what a pattern's run gives for arguments it does not recognise


class _Pattern:
    """How the arguments of a checked call looked, as a generated function for the next
    call: ``run(targs, last)`` tests the arguments and, when they match, calls the compiled
    function on their arrays (``_MISS`` otherwise).

    Modules and bound methods are recognised by identity: either the object the check saw
    (a ``_Ref``) or the module at the same place in the wrapper's latest output (``_Last``),
    each with its arrays at hand, so a recognised module is never flattened. Arrays
    are recognised by type; tuples, named tuples, lists, dicts and ``None`` around them by
    type and length or keys. Arguments passing the test need no walk: objects seen by one
    check share no Variable with each other, and an output's modules are built by the
    call, so they share no Variable with anything that existed before them.
    """

    __slots__ = ("entry", "refs", "run")

    def __init__(self, entry: Any, run: Callable[..., Any], refs: tuple[_Ref, ...]):
        self.entry = entry
        self.run = run
        self.refs = refs  # the objects it recognises, weakly: dead ones make it useless

    def alive(self) -> bool:
        return all(r() is not None for r in self.refs)


def _pure_ok(x: Any, treedef: Any) -> bool:
    leaves, td = _flatten(x)
    return td == treedef and set(map(type, leaves)) <= _ARRAY_TYPES


def _is_container(typ: Any) -> bool:
    return typ in (tuple, list, dict) or (isinstance(typ, type) and _is_namedtuple(typ))


def _children(
    treedef: Any, expr: str, const: Callable[[Any], str]
) -> tuple[list[tuple[Any, Any, str]], str]:
    """The children of a container node at ``expr`` as ``(key, treedef, expression)``,
    and the condition that ``expr`` has exactly those keys (dict) or that length."""
    data = treedef.node_data()
    children = treedef.children()
    if data[0] is dict:
        names = [const(k) for k in data[1]]
        items = [(k, c, f"{expr}[{n}]") for k, c, n in zip(data[1], children, names)]
        # Same length and every key present: the same keys (cheaper than comparing views).
        return items, " and ".join(
            [f"len({expr}) == {len(names)}", *(f"{n} in {expr}" for n in names)]
        )
    items = [(i, c, f"{expr}[{i}]") for i, c in enumerate(children)]
    return items, f"len({expr}) == {len(children)}"


class _TestWriter:
    """Writes the conditions of a pattern's test, one node of an argument at a time, and
    the expressions of the arrays the call passes (``args``, in flattening order)."""

    def __init__(self, last: _Last):
        self.conds: list[str] = []
        self.args: list[str] = []
        self.consts: dict[str, Any] = {
            "_AT": _ARRAY_TYPES,
            "_pure_ok": _pure_ok,
            "_leaves": _leaves,
            "_MISS": _MISS,
            **NAMES,
        }
        self.refs: list[_Ref] = []
        live = [r() for r in last.items]
        self.kept = last.entry.kept if last.entry is not None else ()
        self.in_last = {id(o): j for j, o in enumerate(live) if o is not None}
        self.uses_last = False
        self.locals = 0  # containers bound to a local (x0, x1, ...) by the test

    def const(self, value: Any) -> str:
        name = f"k{len(self.consts)}"
        self.consts[name] = value
        return name

    def local(self) -> str:
        self.locals += 1
        return f"x{self.locals - 1}"

    def node(self, obj: Any, treedef: Any, expr: str) -> bool:
        """Conditions recognising ``obj`` (of structure ``treedef``) at ``expr``; False if
        it can only be checked by walking it."""
        data = treedef.node_data()
        if data is None:
            if type(obj) in _ARRAY_TYPES:
                self.conds.append(f"type({expr}) in _AT")
                self.args.append(expr)
                return True
            return False
        typ = data[0]
        if isinstance(obj, _WEAK_TYPES):
            j = self.in_last.get(id(obj))
            if j is not None:
                self.uses_last = True
                lo, hi = self.kept[j]
                self.conds.append(f"{expr} is L[{j}]() is not None")
                self.args.append(f"*A[{lo}:{hi}]")
            else:
                ref = _Ref(obj, _forget)
                ref.leaves = tuple(_leaves(obj))
                self.refs.append(ref)
                name = self.const(ref)
                self.conds.append(f"{expr} is {name}() is not None")
                self.args.append(f"*{name}.leaves")
            return True
        if typ is type(None):
            self.conds.append(f"{expr} is None")
            return True
        if not _is_container(typ) or type(obj) is not typ:
            return False
        if is_pure(treedef):
            try:
                leaves: list[str] = []
                self.conds += pure_conds(expr, treedef, self.const, self.local, leaves)
                self.args += leaves
            except TooLarge:  # checked by flattening it
                var = self.local()
                self.conds.append(
                    f"type({var} := {expr}) is {self.const(typ)} "
                    f"and _pure_ok({var}, {self.const(treedef)})"
                )
                self.args.append(f"*_leaves({var})")
            return True
        # The container is read once into a local; its children are read from that.
        var = self.local()
        self.conds.append(f"type({var} := {expr}) is {self.const(typ)}")
        items, shape = _children(treedef, var, self.const)
        self.conds.append(shape)
        return all(self.node(obj[k], c, e) for k, c, e in items)


def _learn_pattern(
    entry: Any, targs: tuple[Any, ...], parts: Sequence[Any], last: _Last
) -> _Pattern | None:
    """A pattern for the arguments of a checked plain call, or None if some argument can
    only be checked by walking it."""
    writer = _TestWriter(last)
    writer.conds.append(f"len(t) == {len(targs)}")
    for i, (a, part) in enumerate(zip(targs, parts)):
        if not writer.node(a, part, f"t[{i}]"):
            return None
    conds, consts = writer.conds, writer.consts
    if writer.uses_last:
        consts["_E"] = last.entry
        conds.insert(
            1, "S.entry is _E and (L := S.items) is not None and (A := S.arrays) is not None"
        )
    consts["_J"] = entry.jitted
    source = (
        f"def factory({', '.join(consts)}):\n"
        "    def run(t, S):\n"
        f"        if {' and '.join(conds)}:\n"
        f"            return _J({', '.join(writer.args)})\n"
        "        return _MISS\n"
        "    return run\n"
    )
    factory = _FACTORIES.get(source)
    if factory is None:  # the source depends on the arguments' structure only
        if len(_FACTORIES) >= _FACTORIES_MAX:
            _FACTORIES.clear()
        namespace: dict[str, Any] = {}
        exec(source, namespace)
        factory = _FACTORIES[source] = namespace["factory"]
    return _Pattern(entry, factory(**consts), tuple(writer.refs))


_FACTORIES: dict[str, Callable[..., Callable[..., Any]]] = {}
_FACTORIES_MAX = 1024


def _keeper(
    spec: Any,
) -> tuple[Callable[[Any, Any, Any], tuple[Any, Any]] | None, tuple[tuple[int, int], ...]]:
    """The modules of an output that the next call may pass back (the model, the modules
    inside an optimizer state), reached through its tuples, lists and dicts, when every
    leaf of the output is an array: ``keep(out, arrays, drop)`` gives weak references to
    them (calling ``drop`` when one is freed) and their arrays, module after module; with
    it, each module's slice of those arrays. None if there are none."""
    if spec.kind != "tree" or spec.static:
        return None, ()
    exprs: list[str] = []
    positions: list[int] = []  # of the kept arrays among the output's
    kept: list[tuple[int, int]] = []
    consts: list[Any] = []

    def const(value: Any) -> str:
        consts.append(value)
        return f"c{len(consts) - 1}"

    def walk(treedef: Any, expr: str, start: int) -> None:
        data = treedef.node_data()
        if data is None:
            return
        typ = data[0]
        if isinstance(typ, type) and issubclass(typ, _WEAK_TYPES):
            exprs.append(expr)
            kept.append((len(positions), len(positions) + treedef.num_leaves))
            positions.extend(range(start, start + treedef.num_leaves))
        elif _is_container(typ):
            for _, child, child_expr in _children(treedef, expr, const)[0]:
                walk(child, child_expr, start)
                start += child.num_leaves

    walk(spec.treedef, "out", 0)
    if not exprs:
        return None, ()
    if positions == list(range(spec.treedef.num_leaves)):
        arrays = "a"  # the modules hold every array of the output
    elif len(positions) <= 1:
        arrays = f"({''.join(f'a[{p}],' for p in positions)})"
    else:
        arrays = f"{const(operator.itemgetter(*positions))}(a)"
    names = "".join(f", c{i}" for i in range(len(consts)))
    source = (
        f"def factory(_weak{names}):\n"
        f"    return lambda out, a, D: (({''.join(f'_weak({e}, D), ' for e in exprs)}), {arrays})\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    return namespace["factory"](weakref.ref, *consts), tuple(kept)
