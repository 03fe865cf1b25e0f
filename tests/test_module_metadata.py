"""Public objects report their public module (trio's ``fixup_module_metadata``): every name a
public package exports says it lives in a module a user may import, and is found there; and
renaming the module loses nothing a type hint needs (``typing.get_type_hints``, which attrs,
cattrs and the API reference use, still resolves every annotation)."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import sys
import typing

import pytest

import broker
from broker._module_metadata import DEFINED_IN, fixup_module_metadata

ROOT = pathlib.Path(broker.__file__).parent
# Every package a user may import: the CLI is an application, not an API; scenarios is data.
PUBLIC_PACKAGES = sorted(
    name
    for name in (
        ".".join(init.parent.relative_to(ROOT.parent).parts) for init in ROOT.rglob("__init__.py")
    )
    if not any(part.startswith("_") for part in name.split("."))
    and name not in {"broker.cli", "broker.scenarios"}
)


def exported() -> list[tuple[str, str, object]]:
    found = []
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            found.append((package, name, getattr(module, name)))
    return found


def test_every_public_package_fixes_its_names_up() -> None:
    for package in PUBLIC_PACKAGES:
        init = ROOT.parent.joinpath(*package.split("."), "__init__.py").read_text()
        assert "fixup_module_metadata(__name__, globals())" in init, package


@pytest.mark.parametrize(("package", "name", "obj"), exported(), ids=lambda v: str(v)[:40])
def test_an_exported_object_reports_a_public_module_that_holds_it(
    package: str, name: str, obj: object
) -> None:
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str) or not module.startswith("broker"):
        return  # a type alias, a constant, or another library's object
    assert not any(part.startswith("_") for part in module.split(".")), (
        f"{package}.{name} reports the private module {module}"
    )
    assert getattr(importlib.import_module(module), obj.__name__) is obj  # type: ignore[attr-defined]
    # the shallowest public package that exports it
    assert len(module.split(".")) <= len(package.split("."))


@pytest.mark.parametrize(("package", "name", "obj"), exported(), ids=lambda v: str(v)[:40])
def test_renaming_loses_no_annotation(package: str, name: str, obj: object) -> None:
    """An annotation that resolved where the object was written is resolved: it needs no
    lookup in the module the object now names (where ``get_type_hints`` would look)."""
    if not (isinstance(obj, type) or inspect.isfunction(obj)):
        return
    public = f"{obj.__module__}.{obj.__qualname__}"
    written = DEFINED_IN.get(public)
    if written is None:
        assert not obj.__module__.startswith("broker") or public not in DEFINED_IN
        return
    for annotation in inspect.get_annotations(obj).values():
        if isinstance(annotation, str):  # left unresolved: it must not resolve where written
            with pytest.raises(NameError):
                eval(annotation, vars(sys.modules[written]))


def test_the_repr_names_the_public_module() -> None:
    assert repr(broker.Broker) == "<class 'broker.Broker'>"
    assert broker.MemoryStore.__module__ == "broker"  # claimed again by the shallower export
    assert broker.store.sqlite.EventRow.__module__ == "broker.store.sqlite"


def test_a_sibling_or_outside_object_is_left_alone() -> None:
    class Outside:
        pass

    Outside.__module__ = "broker.rules._engine"
    before = typing.cast("typing.Any", Outside).__module__
    fixup_module_metadata("broker.store", {"__all__": ["Outside"], "Outside": Outside})
    assert Outside.__module__ == before  # broker.store does not claim broker.rules' object
    fixup_module_metadata("broker.rules", {"__all__": ["Outside"], "Outside": Outside})
    assert Outside.__module__ == "broker.rules"


def test_a_malformed_all_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^__all__ of broker.x must be a list of names, got str$"):
        fixup_module_metadata("broker.x", {"__all__": "Broker"})
