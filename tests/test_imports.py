"""Imports stay lean: ``import pytreemod`` and ``import adapters.linen`` load what a
program touches when it touches it.

Each check runs in a fresh interpreter (a subprocess), since this test session has long
since imported everything. Nothing here is timed (``benchmarks/imports.py`` times it).
"""

import ast
import functools
import json
import os
import pathlib
import subprocess
import sys

import pytest

import adapters
import pytreemod as pm

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Optional or heavy modules that neither package may import at import time.
HEAVY = ("rich", "safetensors", "orbax", "msgpack", "treescope", "beartype", "optax")


@functools.cache
def _modules_after(statement: str) -> frozenset[str]:
    """Every module loaded by ``statement`` in a fresh interpreter. Cached: several tests
    ask about the same statement, and each interpreter start imports JAX (seconds)."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return frozenset(json.loads(done.stdout.strip().splitlines()[-1]))


def _loaded_after(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules among ``prefixes`` (top-level names) loaded by ``statement`` in a fresh
    interpreter."""
    return sorted(
        m for m in _modules_after(statement) if m.split(".")[0] in prefixes or m in prefixes
    )


def test_import_pytreemod_loads_no_heavy_optional_module() -> None:
    loaded = _loaded_after("import pytreemod", (*HEAVY, "flax", "equinox", "jaxtyping"))
    assert loaded == []


def test_import_pytreemod_leaves_nn_to_first_use() -> None:
    loaded = _loaded_after("import pytreemod", ("pytreemod",))
    assert "pytreemod._module" in loaded  # the core is there
    assert not [m for m in loaded if m.startswith("pytreemod.nn")]
    assert not [m for m in loaded if m.startswith(("pytreemod._transforms", "pytreemod._sharding"))]
    loaded = _loaded_after("import pytreemod as pm; pm.scan", ("pytreemod",))
    # (pm.scan reads stacks' shardings on Explicit meshes: it loads pytreemod._sharding.)
    assert "pytreemod._transforms_scan" in loaded and "pytreemod._checkpoint" not in loaded
    loaded = _loaded_after("import pytreemod as pm; pm.nn.Linear", ("pytreemod",))
    assert "pytreemod.nn._linear" in loaded


def test_import_nn_builds_no_checker_until_a_layer_runs() -> None:
    assert _loaded_after("import pytreemod.nn", HEAVY) == []
    run = (
        "import jax, jax.numpy as jnp, pytreemod as pm\n"
        "pm.nn.Linear(2, 3, key=jax.random.key(0))(jnp.ones((1, 2)))"
    )
    assert _loaded_after(run, ("beartype",)) != []  # the first call builds the checker


def test_import_adapters_linen_loads_no_heavy_optional_module() -> None:
    loaded = _loaded_after("import adapters.linen", (*HEAVY, "flax", "equinox"))
    assert loaded == []
    # jax.extend imports every submodule it has (Pallas among them): only when used.
    assert [m for m in _loaded_after("import adapters.linen", ("jax",)) if "pallas" in m] == []
    loaded = _loaded_after("import adapters.linen", ("adapters",))
    assert "adapters.linen" in loaded
    assert not [m for m in loaded if m.startswith(("adapters.nnx", "adapters.training"))]


def test_importing_the_packages_leaves_jax_backends_unstarted() -> None:
    # A program may set JAX's device options after its imports (Flax's guides set
    # jax_num_cpu_devices after `from flax import nnx`): nothing may start a backend.
    code = (
        "import jax\nimport pytreemod, adapters.linen, adapters.nnx\n"
        "jax.config.update('jax_num_cpu_devices', 3)\nprint(len(jax.devices('cpu')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "3"


def test_lazy_names_resolve_to_their_definitions() -> None:
    from pytreemod import _checkpoint, _tabulate, _train_state

    assert pm.save is _checkpoint.save and pm.load is _checkpoint.load
    assert pm.tabulate is _tabulate.tabulate and pm.TrainState is _train_state.TrainState
    from pytreemod import (
        _sharding,
        _transforms_autodiff,
        _transforms_axes,
        _transforms_map,
        _transforms_scan,
    )

    assert pm.grad is _transforms_autodiff.grad and pm.vmap is _transforms_map.vmap
    assert pm.scan is _transforms_scan.scan and pm.StateAxes is _transforms_axes.StateAxes
    assert pm.shard is _sharding.shard and pm.LogicalRules is _sharding.LogicalRules
    assert {"nn", "save", "TrainState", "Module"} <= set(dir(pm))
    assert adapters.linen.Dense is not None and "nnx" in dir(adapters)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'pytreemod' has no attribute 'nope'"):
        pm.nope  # noqa: B018
    with pytest.raises(AttributeError, match="module 'adapters' has no attribute 'nope'"):
        adapters.nope  # noqa: B018


def _type_checking_names(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    names |= {a.asname or a.name for a in stmt.names}
    return names


def test_type_checkers_see_every_lazy_name() -> None:
    # Each lazily exported name is also imported under TYPE_CHECKING, so pyright and
    # IDEs see it (an explicit `as` re-export).
    assert _type_checking_names(ROOT / "pytreemod" / "__init__.py") == set(pm._LAZY)
    assert _type_checking_names(ROOT / "adapters" / "__init__.py") == set(adapters._SUBMODULES)
