"""One question to ``broker serve`` over its Unix socket: a JSON line out, a JSON line back.

The socket is ``$BROKER_SOCKET`` when set, else ``$XDG_RUNTIME_DIR/broker/serve.sock``, else
``/tmp/broker-UID/serve.sock``: a folder only its user may enter (``0700``) holding a socket
only its user may open (``0600``); the service also checks the peer's uid. Stdlib only.
"""

from __future__ import annotations

import json
import os
import socket
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time (module doc of broker_hook)
    from typing import Any

__all__ = ["MAX_REPLY", "ServiceError", "ask", "default_socket_path"]

#: The longest reply read from the service.
MAX_REPLY = 1 << 20


class ServiceError(Exception):
    """The service could not be asked, or did not answer (the message names why and the fix)."""


def default_socket_path() -> str:
    """Where ``broker serve`` listens and ``broker hook`` connects (module doc)."""
    given = os.environ.get("BROKER_SOCKET")
    if given:
        return given
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "broker", "serve.sock")
    return os.path.join("/tmp", f"broker-{os.getuid()}", "serve.sock")


def ask(path: str, question: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send *question* to the service at *path*; its reply, within *timeout* seconds."""
    deadline = time.monotonic() + timeout
    line = json.dumps(question, ensure_ascii=True).encode() + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            conn.sendall(line)
            received = bytearray()
            while not received.endswith(b"\n"):
                conn.settimeout(max(0.001, deadline - time.monotonic()))
                chunk = conn.recv(65536)
                if not chunk:
                    raise ServiceError(
                        "the approval service closed the connection without answering: see "
                        "its log (broker serve) and try again"
                    )
                received += chunk
                if len(received) > MAX_REPLY:
                    raise ServiceError("the approval service's reply is too long")
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise ServiceError(
            f"no approval service at {path} ({exc.strerror}): start it with 'broker serve' "
            "(or set BROKER_SOCKET to where it listens)"
        ) from None
    except TimeoutError:
        raise ServiceError(
            f"no answer from the approval service within {timeout:g} s: answer sooner, or "
            "raise broker hook's --timeout (below the hook's own timeout)"
        ) from None
    except PermissionError as exc:
        raise ServiceError(
            f"cannot open the approval service's socket {path} ({exc.strerror}): run the hook "
            "as the user who runs broker serve"
        ) from None
    except OSError as exc:
        raise ServiceError(
            f"cannot talk to the approval service at {path} ({exc.strerror or exc}): check "
            "that broker serve is running"
        ) from None
    try:
        reply = json.loads(received)
    except ValueError:
        raise ServiceError("the approval service's reply is not JSON") from None
    if not isinstance(reply, dict):
        raise ServiceError("the approval service's reply is not a JSON object")
    return reply
