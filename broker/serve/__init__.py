"""The approval service of ``broker serve``: hooks of outside agents (Claude Code, Codex) ask
it over a Unix socket, one question per tool call, each agent session one broker session.

Synopsis::

    async with open_broker(store="serve.sqlite", rules=rules) as broker:
        async with broker.answerer(broker.remote_answerer(deadline=45, allow_always=True)):
            async with trio.open_nursery() as nursery:
                service = ApprovalService(broker=broker, nursery=nursery)
                await nursery.start(serve_socket, default_socket_path(), service)

The hook side (``broker hook claude-code|codex``) is :mod:`broker_hook`: stdlib only, so a
hook process starts as fast as a bare interpreter.
"""

from ._listener import SocketError as SocketError
from ._listener import serve_socket as serve_socket
from ._service import ApprovalService as ApprovalService
from ._service import explain as explain
from ._service import session_id_for as session_id_for
from ._wire import FrameError as FrameError
from ._wire import Question as Question
from ._wire import Reply as Reply
from ._wire import read_question as read_question

__all__ = [
    "ApprovalService",
    "FrameError",
    "Question",
    "Reply",
    "SocketError",
    "explain",
    "read_question",
    "serve_socket",
    "session_id_for",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
