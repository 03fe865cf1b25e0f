"""The web approval inbox: pending questions live in a browser, answered with one click.

Synopsis (in process; ``broker inbox STORE`` runs the same as its own process)::

    from broker.inbox import serve_inbox

    async with open_broker(store="logs/sessions.sqlite") as broker:
        async with broker.answerer(broker.remote_answerer()), trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_inbox, broker, token=TOKEN))
            ...  # open http://127.0.0.1:{port}/?token=TOKEN

A question reaches the inbox when the asking broker has ``broker.remote_answerer()`` in its
waterfall; the inbox answers through the answer board (decision 0018), so the asking broker
decides and records ``answeredBy`` exactly as for any answer from elsewhere. Security model:
:mod:`broker.inbox._auth`; the page: :mod:`broker.inbox._page`; the live list:
:mod:`broker.inbox._feed`.
"""

from ._auth import InboxKeys as InboxKeys

# For the other packages of broker (their front door into this one); not part of the
# public API, so not in __all__.
from ._auth import check_token as check_token
from ._serve import InboxListenError as InboxListenError
from ._serve import serve_inbox as serve_inbox

__all__ = ["InboxKeys", "InboxListenError", "serve_inbox"]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
