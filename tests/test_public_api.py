"""The public API is a deliberate list, and the adapters use nothing else.

If a change adds or removes a public name, update ``tests/public_api.txt`` in the same
commit (``python -m tests.test_public_api`` rewrites it), so the API change is visible in
review.
"""

import pathlib
import re
import sys

import pytreemod
import pytreemod.nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "public_api.txt"


def public_names() -> list[str]:
    names = [n for n in dir(pytreemod) if not n.startswith("_")]
    names += [f"nn.{n}" for n in dir(pytreemod.nn) if not n.startswith("_")]
    return sorted(names)


def test_public_names_match_snapshot() -> None:
    expected = SNAPSHOT.read_text().split()
    assert public_names() == expected, (
        "pytreemod's public names changed; if intended, run `python -m tests.test_public_api`"
    )


def test_public_names_are_documented() -> None:
    undocumented = [
        n
        for n in dir(pytreemod)
        if not n.startswith("_")
        and callable(getattr(pytreemod, n))
        and not (getattr(pytreemod, n).__doc__ or "").strip()
    ]
    assert undocumented == []


def test_adapters_use_only_public_pytreemod() -> None:
    private = re.compile(r"(from|import)\s+pytreemod\.(_|nn\._)")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "adapters").rglob("*.py")
        if private.search(path.read_text())
    ]
    assert offenders == [], f"adapters import private pytreemod modules: {offenders}"


def test_pytreemod_never_imports_adapters_flax_or_equinox() -> None:
    banned = re.compile(r"^\s*(from|import)\s+(adapters|flax|equinox)\b", re.M)
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "pytreemod").rglob("*.py")
        if banned.search(path.read_text())
    ]
    assert offenders == []


if __name__ == "__main__":
    SNAPSHOT.write_text("\n".join(public_names()) + "\n")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
