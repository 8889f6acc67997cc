"""``pm.sharding``: the pieces of sharding below the functions ``pytreemod`` exports.

``pm.shard``, ``pm.get_sharding``, ``pm.with_logical_constraint`` and the rest are in
``pytreemod`` itself (docs/sharding.md). This namespace adds what a layer author or an
adapter builds on:

- ``apply_sharding(x, sharding)``: the one way pytreemod applies a sharding to an array
  (a reshard where an Explicit mesh axis is involved, a constraint on Auto axes);
- ``current_mesh()``: the mesh set with ``jax.set_mesh`` (abstract inside ``jax.jit``),
  or ``None``;
- ``resolve_logical_axes(names, rules)`` and ``UNASSIGNED``: the resolver of logical
  names into mesh axes, with the axes no rule assigns marked;
- ``ExplicitMeshPolicy``, ``explicit_mesh_policy()``, ``use_explicit_mesh_policy(p)``:
  the rules by which ``pm.nn``'s ops shard their outputs on Explicit meshes, as an object
  to read, subclass and replace.
"""

from ._sharding import UNASSIGNED as UNASSIGNED
from ._sharding import ExplicitMeshPolicy as ExplicitMeshPolicy
from ._sharding import RulesFallback as RulesFallback
from ._sharding import Unassigned as Unassigned
from ._sharding import apply_sharding as apply_sharding
from ._sharding import context_mesh as current_mesh
from ._sharding import explicit_mesh_policy as explicit_mesh_policy
from ._sharding import resolve_logical_axes as resolve_logical_axes
from ._sharding import use_explicit_mesh_policy as use_explicit_mesh_policy

__all__ = [
    "UNASSIGNED",
    "ExplicitMeshPolicy",
    "RulesFallback",
    "Unassigned",
    "apply_sharding",
    "current_mesh",
    "explicit_mesh_policy",
    "resolve_logical_axes",
    "use_explicit_mesh_policy",
]
