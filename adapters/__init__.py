"""adapters: Flax's functional core (``adapters.core``) rebuilt over pytreemod."""

from . import core as core
