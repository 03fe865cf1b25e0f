"""Public objects report their public module, as trio's ``fixup_module_metadata`` does.

Synopsis (the last lines of a package's ``__init__``)::

    fixup_module_metadata(__name__, globals())

Why: a class defined in ``broker/_broker.py`` and exported as ``broker.Broker`` would report
``Broker.__module__ == "broker._broker"``, so its repr in a traceback, the API reference and
a type checker's message name a private module the user must not import. After the fixup each
exported name (and the methods and nested classes it holds) reports the package that exports
it, and ``broker.Broker`` is where ``Broker.__module__`` says it is.

Each exported object reports the shallowest public package that exports it: ``broker.store``
claims what ``broker/store/_board.py`` defines, then ``broker``, re-exporting it, claims it
again (``broker.MemoryStore``); ``broker.store.sqlite`` claims ``EventRow`` of
``broker/store/_rows.py``, which only it exports. An object a sibling package defines is left
alone, and so is one already in a public module that is not below the package.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping

__all__ = ["DEFINED_IN", "fixup_module_metadata"]

#: Where each renamed object was written (its public ``module.qualname`` to the private module):
#: what a tool that reads the source needs, and what the tests check the renaming against.
DEFINED_IN: dict[str, str] = {}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _claims(package: str, module: str) -> bool:
    """Whether *package*, exporting an object whose ``__module__`` is *module*, should become
    its module: *module* is public and below *package*, or private with its public part on
    *package*'s line (above it, the same, or below it)."""
    parts = module.split(".")
    private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
    if private is None:
        return module != package and _within(module, package)
    public = ".".join(parts[:private])
    return _within(package, public) or _within(public, package)


def _resolve_annotations(obj: object, module: str) -> None:
    """Evaluate *cls*'s own string annotations in the module that wrote them.

    ``typing.get_type_hints`` (and so attrs' ``resolve_types``, cattrs, the API reference) looks
    a class's string annotations up in ``sys.modules[cls.__module__]``: once the class reports
    its public package, names its defining module imported would no longer resolve. Evaluated
    here, while the defining module is known, they need no lookup later. A name that is not
    there at run time (imported only for type checkers) stays a string, as before.
    """
    if isinstance(obj, type):  # its own, not those a base class wrote elsewhere
        annotations = vars(obj).get("__annotations__")  # the dict itself: it is changed here
    else:
        annotations = getattr(obj, "__annotations__", None)
    where = sys.modules.get(module)
    if not annotations or where is None:
        return
    # A decorated function (functools.wraps) carries the annotations of the one it wraps,
    # written where that one was.
    inner = inspect.unwrap(obj) if callable(obj) else obj
    namespace = getattr(inner, "__globals__", None) or vars(where)
    local = dict(vars(obj)) if isinstance(obj, type) else None
    for name, annotation in list(annotations.items()):
        if isinstance(annotation, str):
            try:
                annotations[name] = eval(annotation, namespace, local)
            except Exception:
                continue


def fixup_module_metadata(package: str, namespace: Mapping[str, object]) -> None:
    """Set ``__module__`` to *package* on every name in the namespace's ``__all__`` that
    *package* should claim (see the module's docstring), and on the functions and classes it
    holds."""
    seen: set[int] = set()

    def fix(obj: object) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        module = getattr(obj, "__module__", None)
        if not isinstance(module, str) or not _claims(package, module):
            return
        _resolve_annotations(obj, module)
        try:
            obj.__module__ = package
        except (AttributeError, TypeError):
            return  # a type alias or a builtin: it cannot say, and need not
        qualname = getattr(obj, "__qualname__", None)
        if isinstance(qualname, str):
            DEFINED_IN.setdefault(
                f"{package}.{qualname}", DEFINED_IN.get(f"{module}.{qualname}", module)
            )

    names = namespace.get("__all__", ())
    if not isinstance(names, (list, tuple)):
        raise TypeError(f"__all__ of {package} must be a list of names, got {type(names).__name__}")
    for name in names:
        fix(namespace[name])
