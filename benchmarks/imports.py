"""Import time in fresh interpreters: ``import jax``, ``import pytreemod``, ``import
flax.linen``, ``import adapters.linen`` and ``import equinox``.

Each round starts one fresh interpreter per statement, in turn (interleaved, so background
load hits every statement alike), and times the statement inside it (interpreter start-up
excluded). The table gives the median over rounds and the ratio to ``import jax``, which
every statement includes. ``python -X importtime -c "import pytreemod"`` shows where the
time goes module by module.

Run: ``python -m benchmarks.imports [--rounds N]`` (prints a Markdown table).
"""

import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
STATEMENTS = (
    "import jax",
    "import pytreemod",
    "import flax.linen",
    "import adapters.linen",
    "import equinox",
)
_PROBE = "import time\nt = time.perf_counter()\n{}\nprint(time.perf_counter() - t)\n"


def import_seconds(statement: str) -> float:
    """Seconds ``statement`` takes in a fresh interpreter."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(statement)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def measure(rounds: int) -> dict[str, list[float]]:
    """Per statement, the seconds of each round (statements interleaved within a round)."""
    times: dict[str, list[float]] = {s: [] for s in STATEMENTS}
    for statement in STATEMENTS:  # warm the file system cache once
        import_seconds(statement)
    for _ in range(rounds):
        for statement in STATEMENTS:
            times[statement].append(import_seconds(statement))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    times = measure(args.rounds)
    end_load = os.getloadavg()[0]
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), Python "
        f"{platform.python_version()}, {args.rounds} rounds, load average {load:.1f} at "
        f"the start and {end_load:.1f} at the end\n"
    )
    jax_median = statistics.median(times["import jax"])
    print("| statement | median (s) | min (s) | / `import jax` |")
    print("|---|---:|---:|---:|")
    for statement, seconds in times.items():
        median = statistics.median(seconds)
        print(f"| `{statement}` | {median:.3f} | {min(seconds):.3f} | {median / jax_median:.2f}x |")


if __name__ == "__main__":
    main()
