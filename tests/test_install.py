"""Installing and using pytreemod outside this checkout (issue 32, items 4 and 5).

The docs name the extra each page needs; CI builds, installs and imports the sdist and
the wheel, and runs pyright on the installation page's typed training step in a fresh
folder against the installed wheel, without this repository's ``typings/`` stubs, as a
user's project sees the package (``.ci/check_dist``: about half a minute, too slow for
this suite). The checks here are the fast ones.
"""

import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
# The extra that provides each optional import a docs page's code may make.
EXTRA_OF = {"orbax": "orbax", "equinox": "compare", "flax": "compare", "treescope": "notebook"}
IMPORT = re.compile(r"^\s*(?:import|from) (orbax|equinox|flax|treescope)\b", re.M)


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"]


def test_every_page_that_imports_an_optional_package_names_its_extra_at_the_top() -> None:
    extras = _extras()
    missing = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        code = "\n".join(BLOCK.findall(text))
        needed = {EXTRA_OF[m] for m in IMPORT.findall(code)}
        top = "\n".join(text.splitlines()[:6])
        for extra in sorted(needed):
            assert extra in extras, f"{page.name} needs extra {extra!r}, which pyproject lacks"
            if f"`{extra}` extra" not in top or "install.md" not in top:
                missing.append(f"{page.name}: {extra}")
    assert missing == []


def test_the_installation_page_lists_every_extra_and_is_in_the_nav() -> None:
    text = (DOCS / "install.md").read_text()
    assert [e for e in _extras() if f"| `{e}` |" not in text] == []
    assert 'pip install -e ".[' in text and "python -m build" in text
    assert "install.md" in (ROOT / "mkdocs.yml").read_text()


def test_ci_builds_installs_and_imports_the_distributions() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    script = (ROOT / ".ci" / "check_dist").read_text()
    commands = [
        line for line in run.splitlines() if line and not line.startswith(("#", "set", "cd"))
    ]
    assert commands == ["make docs", "make test"]
    make = (ROOT / "Makefile").read_text()
    assert "test: lint dist pytest" in make and "\t.ci/check_dist" in make
    assert "-m build" in script and "py.typed" in script and "import adapters, pytreemod" in script


def snippets() -> dict[str, str]:
    """docs/install.md's typed training step, as ``typed.py``, and the same code with
    optax's ``apply_updates`` (which returns an ``ArrayTree``), as ``untyped.py``: the
    files ``.ci/check_dist`` gives pyright."""
    blocks = BLOCK.findall((DOCS / "install.md").read_text())
    step = next(b for b in blocks if "pm.apply_updates" in b)
    code = blocks[0].split("layer =")[0] + step + "\nchecked: Regressor = model\n"
    untyped = code.replace(
        "pm.apply_updates(model, updates)", "optax.apply_updates(model, updates)"
    )
    return {"typed.py": code, "untyped.py": untyped}


def test_the_typing_check_has_the_documented_step_and_a_control() -> None:
    files = snippets()
    assert "return pm.apply_updates(model, updates), opt_state" in files["typed.py"]
    assert "optax.apply_updates(model, updates)" in files["untyped.py"]
    compile(files["typed.py"], "typed.py", "exec")  # what pyright reads is valid Python
    script = (ROOT / ".ci" / "check_dist").read_text()
    assert "--write-snippets" in script and "pyright" in script and "extraPaths" in script


if __name__ == "__main__" and sys.argv[1:2] == ["--write-snippets"]:
    folder = pathlib.Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in snippets().items():
        (folder / name).write_text(text)
