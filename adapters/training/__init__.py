"""``adapters.training``: ``flax.training``'s utilities for Linen training programs.

``train_state`` (``TrainState``), ``checkpoints`` (msgpack and Orbax checkpoints in a
directory), ``common_utils``, ``early_stopping``, ``dynamic_scale``, ``lr_schedule``,
``orbax_utils`` and ``prefetch_iterator``, under Flax's module paths and names.
"""

from . import checkpoints as checkpoints
from . import common_utils as common_utils
from . import dynamic_scale as dynamic_scale
from . import early_stopping as early_stopping
from . import lr_schedule as lr_schedule
from . import orbax_utils as orbax_utils
from . import prefetch_iterator as prefetch_iterator
from . import train_state as train_state
