"""Which extra of txd a built-in scheduler needs (txd.schedulers.plugins.EXTRAS), checked
against pyproject.toml, and the one line a failed import becomes."""

from __future__ import annotations

import tomllib
from pathlib import Path

from txd import install
from txd.schedulers import plugins

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_every_builtin_but_local_cwd_names_an_extra_that_exists() -> None:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert set(plugins.EXTRAS) == set(plugins.BUILTIN) - {plugins.DEFAULT_SCHEDULER}
    for name, extra in plugins.EXTRAS.items():
        assert extra in extras, (name, extra)


def test_a_missing_module_is_said_with_the_extra_to_install() -> None:
    entry = plugins.discover()["kubernetes"]
    e = ModuleNotFoundError("No module named 'yaml'", name="yaml")
    assert plugins.import_error(entry, e) == (
        f"No module named 'yaml': {install.command('kubernetes')} installs it"
    )
    other = plugins.Entry("x", lambda: None)  # type: ignore[arg-type,return-value]
    assert plugins.import_error(other, e) == (
        "No module named 'yaml': install the package that provides it"
    )
    broken = ImportError("cannot import name 'f' from 'm'")
    assert plugins.import_error(entry, broken) == (
        "its module cannot be imported: cannot import name 'f' from 'm'"
    )
