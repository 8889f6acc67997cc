"""Sharding from axis metadata: one package, one resolver, one way to apply a sharding.

See README.md beside this file for the modules and their order, and docs/sharding.md for
the user's view. This file only re-exports what ``pytreemod`` and ``pytreemod.sharding``
make public.
"""

from ._abstract import abstract as abstract
from ._apply import apply_sharding as apply_sharding
from ._boxes import LogicallyPartitioned as LogicallyPartitioned
from ._boxes import Partitioned as Partitioned
from ._boxes import with_logical_partitioning as with_logical_partitioning
from ._boxes import with_partitioning as with_partitioning
from ._mesh import context_mesh as context_mesh
from ._policy import ExplicitMeshPolicy as ExplicitMeshPolicy
from ._policy import explicit_mesh_policy as explicit_mesh_policy
from ._policy import use_explicit_mesh_policy as use_explicit_mesh_policy
from ._resolve import UNASSIGNED as UNASSIGNED
from ._resolve import RulesFallback as RulesFallback
from ._resolve import Unassigned as Unassigned
from ._resolve import logical_to_mesh as logical_to_mesh
from ._resolve import logical_to_mesh_axes as logical_to_mesh_axes
from ._resolve import logical_to_mesh_sharding as logical_to_mesh_sharding
from ._resolve import resolve_logical_axes as resolve_logical_axes
from ._rules import AnyMesh as AnyMesh
from ._rules import LogicalRules as LogicalRules
from ._rules import MeshAxes as MeshAxes
from ._rules import get_logical_axis_rules as get_logical_axis_rules
from ._rules import logical_axis_rules as logical_axis_rules
from ._rules import set_logical_axis_rules as set_logical_axis_rules
from ._trees import get_partition_spec as get_partition_spec
from ._trees import get_sharding as get_sharding
from ._trees import replicate_axis as replicate_axis
from ._trees import shard as shard
from ._trees import with_logical_constraint as with_logical_constraint
