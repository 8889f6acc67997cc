"""``flax.nnx.bridge.interop``: pure NNX and Linen modules as submodules of a bridge
module (``bridge.Module``)."""

from collections.abc import Callable

from ... import linen
from .. import graphlib, rnglib, statelib
from ..module import Module
from . import module as bdg_module
from . import wrappers


def _running_parent() -> tuple[bdg_module.ModuleStackEntry, bdg_module.Module]:
    ctx = bdg_module.current_context()
    assert ctx is not None and ctx.module is not None, "only needed inside bridge Module"
    assert ctx.module.scope is not None
    return ctx, ctx.module


def _attach(ctx: bdg_module.ModuleStackEntry, module: Module, cls: type, name: str | None) -> None:
    """Inside ``compact``, set ``module`` on the parent under ``name`` (auto-named if
    ``None``); in ``setup`` the caller assigns it itself."""
    if ctx.in_compact:
        if name is None:
            name = bdg_module._auto_submodule_name(ctx, cls)
        setattr(ctx.module, name, module)


def nnx_in_bridge_mdl(factory: Callable[[rnglib.Rngs], Module], name: str | None = None) -> Module:
    """A pure NNX module (``factory(rngs)``) as a submodule of the running bridge module.

    At init it is built with the parent's Rngs; otherwise it is built abstractly (its
    values come from the variables being applied) and only its RNG state is computed,
    from the parent's Rngs when there are any.
    """
    from ..transforms.compilation import jit
    from ..transforms.transforms import eval_shape

    ctx, parent = _running_parent()
    scope = parent.scope
    assert scope is not None
    if parent.is_initializing():
        module = factory(scope.rngs)
    else:
        rngs = scope.rngs if scope.rngs else rnglib.Rngs(7)  # any seed: values come later
        module = eval_shape(factory, rngs, graph=True)

        @jit
        def rng_state(rngs: rnglib.Rngs) -> statelib.State:
            return graphlib.state(factory(rngs), rnglib.RngState, graph=True)

        if scope.rngs:
            graphlib.update(module, rng_state(scope.rngs))
    _attach(ctx, module, type(module), name)
    return module


def linen_in_bridge_mdl(linen_module: linen.Module, name: str | None = None) -> Module:
    """A Linen module, wrapped in ``ToNNX`` with the parent's Rngs, as a submodule of the
    running bridge module (initializing when the parent is)."""
    ctx, parent = _running_parent()
    assert parent.scope is not None
    module = wrappers.ToNNX(linen_module, parent.scope.rngs)
    wrappers._set_initializing(module, parent.is_initializing())
    _attach(ctx, module, type(linen_module), name)
    return module
