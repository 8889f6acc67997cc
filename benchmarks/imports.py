"""Import time in fresh interpreters: ``import jax``, ``import pytreemod``, ``import
flax.linen``, ``import adapters.linen`` and ``import equinox``.

Each round starts one fresh interpreter per statement, in turn (interleaved, so background
load hits every statement alike), and times the statement inside it (interpreter start-up
excluded), elapsed and in CPU time. The table gives medians over rounds and the ratio to
``import jax``, which every statement includes. ``python -X importtime -c "import
pytreemod"`` shows where the time goes module by module.

Two settings: the environment as it is, and with Python's bytecode cache on (``.pyc`` files
written by a first import into a temporary ``PYTHONPYCACHEPREFIX``, as an installed package
has them). Where ``PYTHONDONTWRITEBYTECODE`` is set, Python reads bytecode but never
writes it: the project's editable sources then have bytecode only where ``make`` compiled
it (``compileall``, as pip does for an installed wheel); without that, every fresh
interpreter would compile them again, while jax and flax come precompiled from
site-packages.

Run: ``python -m benchmarks.imports [--rounds N]`` (prints a Markdown table).
"""

import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
STATEMENTS = (
    "import jax",
    "import pytreemod",
    "import flax.linen",
    "import adapters.linen",
    "import equinox",
)
_PROBE = (
    "import time\nt, c = time.perf_counter(), time.process_time()\n{}\n"
    "print(time.perf_counter() - t, time.process_time() - c)\n"
)


def import_seconds(statement: str, cache: str | None = None) -> tuple[float, float]:
    """Seconds ``statement`` takes in a fresh interpreter: elapsed, and CPU time. With
    ``cache`` (a folder), bytecode is written there and read back."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(statement)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def measure(rounds: int, cache: str | None) -> dict[str, list[tuple[float, float]]]:
    """Per statement, the (elapsed, CPU) seconds of each round (statements interleaved
    within a round)."""
    times: dict[str, list[tuple[float, float]]] = {s: [] for s in STATEMENTS}
    for statement in STATEMENTS:  # warm the file system cache (and the bytecode cache)
        import_seconds(statement, cache)
    for _ in range(rounds):
        for statement in STATEMENTS:
            times[statement].append(import_seconds(statement, cache))
    return times


def table(times: dict[str, list[tuple[float, float]]]) -> None:
    """Medians, elapsed and CPU, and their ratios to ``import jax``."""
    wall = {s: statistics.median(t[0] for t in runs) for s, runs in times.items()}
    cpu = {s: statistics.median(t[1] for t in runs) for s, runs in times.items()}
    print("| statement | elapsed, median (s) | / `import jax` | CPU, median (s) | / `import jax` |")
    print("|---|---:|---:|---:|---:|")
    for s in STATEMENTS:
        print(
            f"| `{s}` | {wall[s]:.3f} | {wall[s] / wall['import jax']:.2f}x | {cpu[s]:.3f} | "
            f"{cpu[s] / cpu['import jax']:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    no_cache = os.environ.get("PYTHONDONTWRITEBYTECODE") is not None
    with tempfile.TemporaryDirectory() as cache:
        as_is = measure(args.rounds, None)
        cached = measure(args.rounds, cache)
    end_load = os.getloadavg()[0]
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), Python "
        f"{platform.python_version()}, {args.rounds} rounds, load average {load:.1f} at "
        f"the start and {end_load:.1f} at the end\n"
    )
    print(
        "### The environment as it is"
        + (
            " (PYTHONDONTWRITEBYTECODE set: only the bytecode already on disk is read, "
            "for the project what `make` compiled)"
            if no_cache
            else ""
        )
        + "\n"
    )
    table(as_is)
    print("\n### With the bytecode cache\n")
    table(cached)
    print(
        "\nElapsed: wall-clock time of the statement; CPU: the interpreter's CPU time for it, "
        "which background load on a shared machine disturbs less."
    )


if __name__ == "__main__":
    main()
