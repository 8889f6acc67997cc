"""``adapters.linen.summary``: ``tabulate``, a table of a module's calls, inputs, outputs,
variables and FLOPs (``flax.linen.summary``).

The implementation lives in ``_module/_summary.py`` (the table and its rendering) and
``_module/_values.py`` (how a value is shown); this file is the Flax-path face.
"""

from ._module._summary import _ALL_BUT_INTERMEDIATES as _ALL_BUT_INTERMEDIATES
from ._module._summary import Row as Row
from ._module._summary import Table as Table
from ._module._summary import _as_yaml_str as _as_yaml_str
from ._module._summary import _bytes_repr as _bytes_repr
from ._module._summary import _get_call_flops as _get_call_flops
from ._module._summary import _get_flops as _get_flops
from ._module._summary import _get_module_table as _get_module_table
from ._module._summary import _get_module_variables as _get_module_variables
from ._module._summary import _get_path_variables as _get_path_variables
from ._module._summary import _normalize_structure as _normalize_structure
from ._module._summary import _process_inputs as _process_inputs
from ._module._summary import _render_table as _render_table
from ._module._summary import _size_and_bytes as _size_and_bytes
from ._module._summary import _size_and_bytes_repr as _size_and_bytes_repr
from ._module._summary import tabulate as tabulate
from ._module._values import _ArrayRepresentation as _ArrayRepresentation
from ._module._values import _from_value_representation as _from_value_representation
from ._module._values import _get_value_representation as _get_value_representation
from ._module._values import _ObjectRepresentation as _ObjectRepresentation
from ._module._values import _PartitionedArrayRepresentation as _PartitionedArrayRepresentation
from ._module._values import _represent_tree as _represent_tree
from ._module._values import _ValueRepresentation as _ValueRepresentation

__all__ = ["Row", "Table", "tabulate"]
