"""A flavor whose extra is not installed is refused with one line naming the extra, and the
core lock `make demo` installs is project.lock's subset without any extra.

A missing library is simulated the way Python itself spells "not importable":
``sys.modules[name] = None`` makes ``import name`` raise ModuleNotFoundError."""

from __future__ import annotations

import importlib.util
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from builder.convert import converter_for
from builder.convert.extras import EXTRA_PACKAGES, FLAVOR_EXTRAS
from builder.errors import ConversionError, MissingExtraError
from tools.locks import pinned

ROOT = Path(__file__).resolve().parents[3]

# (flavor, module made unimportable, the extra the refusal must name)
CASES = [
    ("pytorch", "torch", "torch"),
    ("pytorch", "onnxscript", "torch"),
    ("keras", "keras", "keras"),
    ("tensorflow", "tf2onnx", "keras"),
    ("xgboost", "xgboost", "boosting"),
    ("xgboost", "onnxmltools", "boosting"),
    ("lightgbm", "lightgbm", "boosting"),
    ("lightgbm", "onnxmltools", "boosting"),
    ("catboost", "catboost", "catboost"),
]


@pytest.mark.parametrize(("flavor", "module", "extra"), CASES)
def test_a_missing_flavor_library_is_refused_naming_its_extra(
    monkeypatch: pytest.MonkeyPatch, flavor: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)

    with pytest.raises(MissingExtraError) as caught:
        converter_for(flavor)

    err = caught.value
    assert isinstance(err, ConversionError) and err.exit_code == 4  # as an unsupported flavor
    assert err.extra == extra
    assert "\n" not in err.message and "\n" not in (err.hint or "")
    assert f"the {flavor} flavor needs the {extra} extra, which is not installed" in err.message
    # what could not be imported: the blocked module, or one before it absent here (a venv
    # with only the core installed lacks torch before onnxscript)
    modules = FLAVOR_EXTRAS[flavor][1]
    assert next(m for m in modules if m == module or importlib.util.find_spec(m) is None) in err.message
    assert err.hint is not None and f"the {extra} extra" in err.hint
    assert "make venv" in err.hint and f"the {extra} extra" in err.hint
    assert all(package in err.hint for package in EXTRA_PACKAGES[extra])


def test_the_refusal_prints_as_one_error_and_one_hint_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `builder export` prints (exit 4): the hint's command survives the CLI's rendering."""
    from builder.cli.main import report_error

    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(MissingExtraError) as caught:
        converter_for("xgboost")
    report_error(caught.value)

    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("error: the xgboost flavor needs the boosting extra, which is not installed")
    assert lines[1].startswith("hint: install the boosting extra")
    # the extra's brackets survive the CLI's rich rendering (escaped, not read as a style tag)
    assert "make venv" in lines[1] and "boosting extra" in lines[1]


@pytest.mark.parametrize("flavor", ["sklearn", "onnx"])
def test_the_core_flavors_need_no_extra(monkeypatch: pytest.MonkeyPatch, flavor: str) -> None:
    for module in {m for _, modules in FLAVOR_EXTRAS.values() for m in modules}:  # every extra's
        monkeypatch.setitem(sys.modules, module, None)
    assert converter_for(flavor).flavor == flavor


def test_every_flavor_extra_is_one_pyproject_declares() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, packages in EXTRA_PACKAGES.items():
        assert {_name(r) for r in extras[extra]} == set(packages), extra
    for flavor, (extra, modules) in FLAVOR_EXTRAS.items():
        assert extra in extras, flavor
        declared = {_name(r) for r in extras[extra]}
        for module in modules:
            # the distribution that installs the module: xgboost-cpu installs ``xgboost``
            providers = {_name(d) for d in metadata.packages_distributions().get(module, [module])}
            assert providers & declared, f"{flavor}: {module} is not in the {extra} extra"


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0]).lower()


def _pins(path: Path) -> dict[str, str]:
    return {name: version for name, (_, version) in pinned(path).items()}


def test_the_core_lock_is_project_lock_s_subset_without_the_extras() -> None:
    """`make demo` installs core.lock, `make test` project.lock over the same venv: every core
    pin must be project.lock's, or the two would resolve different versions."""
    import tomllib

    core = _pins(ROOT / "requirements" / "core.lock")
    # torch is locked on its own (requirements/torch-cpu.lock; tools/locks.py says why)
    full = _pins(ROOT / "requirements" / "project.lock") | _pins(ROOT / "requirements" / "torch-cpu.lock")
    assert {n: v for n, v in core.items() if full.get(n) != v} == {}
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("torch", "keras", "boosting", "catboost", "spark", "dev"):
        for requirement in extras[extra]:
            name = _name(requirement)
            assert name in full, f"{name} ({extra}) is not pinned in project.lock"
            if name not in ("pytest", "mypy"):  # locust requires pytest, feast SQLAlchemy[mypy]
                assert name not in core, f"{name} ({extra} extra) is in core.lock"
