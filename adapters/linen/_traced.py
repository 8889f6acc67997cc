"""The layer math of ``pytreemod.nn.functional`` wrapped in ``pm.trace_once``.

Inside a trace (``jit``, ``eval_shape``, ``init`` under ``jit``), a layer called again with
the same configuration and input shapes reuses the first call's trace instead of running
the math's Python again: a ResNet's repeated blocks cost one trace each. Eager calls run
the plain functions. Layers use these only with the default ``lax`` primitives: a custom
``dot_general``/``conv_general_dilated`` (possibly a stateful module, as fp8's) goes
through ``pytreemod.nn.functional`` directly.
"""

import pytreemod as pm
from pytreemod.nn import functional as F

compute_stats = pm.trace_once(F.compute_stats)
normalize = pm.trace_once(F.normalize)
conv = pm.trace_once(F.conv)
conv_transpose = pm.trace_once(F.conv_transpose)
dense_general = pm.trace_once(F.dense_general)
max_pool = pm.trace_once(F.max_pool)
avg_pool = pm.trace_once(F.avg_pool)
