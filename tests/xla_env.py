"""XLA_FLAGS for the test suite; imports nothing, so conftest can set them before JAX."""


def xla_flags(devices: int, given: str = "") -> str:
    """``XLA_FLAGS`` for the tests and the worker processes they start: ``devices``
    simulated CPU devices, and XLA's LLVM back end at ``-O0``.

    The programs tests compile are small and run once or a few times, so compiling them
    is most of the suite's time; LLVM's optimisations of the generated machine code
    double it and buy nothing here. XLA's HLO passes (the optimised HLO that tests
    compare and count collectives in) do not depend on this flag. Flags already in
    ``given`` (the user's environment) win.
    """
    flags = given.split()
    for name, value in (
        ("--xla_force_host_platform_device_count", devices),
        ("--xla_backend_optimization_level", 0),
    ):
        if not any(f.startswith(f"{name}=") for f in flags):
            flags.append(f"{name}={value}")
    return " ".join(flags)
