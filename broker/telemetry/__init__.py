"""OpenTelemetry traces and metrics of the broker's questions (the ``otel`` extra).

Synopsis::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.metrics import MeterProvider
    import broker.telemetry

    broker.telemetry.enable(tracer_provider=TracerProvider(...), meter_provider=MeterProvider(...))
    # every question from now on: a span "approval {tool}" (a child of the caller's current
    # span), a child span "approval wait {tool}" while answerers are consulted, and the
    # metrics broker.approval.questions, broker.approval.duration, broker.approval.pending

    with broker.telemetry.export_from_env("serve"):   # what the commands do: OTEL_* variables
        ...

Without :func:`enable` or :func:`disable`, telemetry is on when a global OpenTelemetry SDK
provider is installed by the first question of the process. Off (no SDK, or the API not
installed at all: ``import broker`` never needs it), a question pays one test of an
attribute. The span, attribute and metric names: ``design/telemetry.md``.
"""

from ._metrics import DURATION as DURATION
from ._metrics import DURATION_BUCKETS as DURATION_BUCKETS
from ._metrics import PENDING as PENDING
from ._metrics import QUESTIONS as QUESTIONS
from ._setup import export_from_env as export_from_env
from ._spans import SCOPE as SCOPE
from ._spans import disable as disable
from ._spans import enable as enable
from ._spans import is_enabled as is_enabled

# For the request algorithm (its front door into this package); not part of the public API,
# so not in __all__.
from ._spans import SWITCH as SWITCH  # isort: skip
from ._spans import QuestionTrace as QuestionTrace  # isort: skip
from ._spans import observe_question as observe_question  # isort: skip

__all__ = [
    "DURATION",
    "DURATION_BUCKETS",
    "PENDING",
    "QUESTIONS",
    "SCOPE",
    "disable",
    "enable",
    "export_from_env",
    "is_enabled",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
