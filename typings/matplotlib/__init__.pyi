# Stub for the part of matplotlib the examples use (plots of the loss). matplotlib ships
# types, but Axes methods take untyped **kwargs and subplots returns Any for the axes, so
# every call was partially unknown. Keyword arguments are the Line2D/Text properties.
def use(backend: str, *, force: bool = True) -> None: ...
