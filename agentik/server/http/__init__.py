"""The HTTP engine: HTTP/1.1 on trio and llhttp, serving one ASGI app, and the
request and response pieces every protocol above it shares.

The protocols (``agentik.server.native``, ``.agui``, ``.a2a``) stand on this
door and on nothing else of the engine; the engine knows none of them
(``lint-imports``, contract ``http-engine``). Its interface, top to bottom:

- Serving: ``serve(app, host=…, port=…, settings=HttpSettings(…))`` runs an
  ASGI app (``ASGIApp``: ``Scope``, ``Receive``, ``Send``) on a listening
  socket until its shutdown trigger, with keep-alive, pipelining, request
  deadlines (``ConnectionLimits``) and bounded memory per connection
  (``_connection``, ``_cycle``, ``_framing``, ``_h1``, ``_timer``,
  ``_accept``, ``_socket_io``), and a reserve of connections past the bound for the
  cluster's own requests (``PeerReserve``). A request the engine refused itself after the app had it
  leaves its status in the scope under ``REFUSED``.
- Routing: a protocol hands the app its routes as a list of Starlette
  ``Route`` objects whose endpoints take a ``Request`` and return a
  ``Response`` (Starlette's own, imported from Starlette: this door
  re-exports no library's objects), or are ASGI apps themselves; the app mounts them in one
  Starlette router behind its guard (``agentik.server._app``).
- Requests: the body read under a limit (``read_body``, ``receive_body``),
  strict JSON (``parse_json``, ``read_json``), typed fields (``as_object``,
  ``field_str``, ``query_int``, …) and ids (``check_id``); every refusal an
  ``HttpError`` (400, 413, 422 …) raised before any state is touched.
- Responses: ``json_response``/``send_json`` and ``error_body``, the one
  shape of every error; ``Redirect`` (307) to another node.
- Relaying: a ``Relay`` given to ``serve`` takes the requests it wants right
  after their head, before any scope or app, and writes their answers as
  bytes (``RelayedRequest``, ``Reply``; ``_relay``): the cluster's hop.
- Server-sent events: ``sse_frame`` (one JSON object per ``data:`` line) and
  ``EventStream``, the streaming response with heartbeats (``HEARTBEAT``)
  that ends whole when the client leaves.
"""

from agentik._public import publish as _publish
from agentik.server.http._errors import HttpError as HttpError
from agentik.server.http._errors import NotHere as NotHere
from agentik.server.http._errors import Redirect as Redirect
from agentik.server.http._framing import ASGIApp as ASGIApp
from agentik.server.http._framing import Message as Message
from agentik.server.http._framing import Receive as Receive
from agentik.server.http._framing import Scope as Scope
from agentik.server.http._framing import Send as Send
from agentik.server.http._relay import Relay as Relay
from agentik.server.http._relay import RelayedRequest as RelayedRequest
from agentik.server.http._relay import Reply as Reply
from agentik.server.http._request import as_list as as_list
from agentik.server.http._request import as_object as as_object
from agentik.server.http._request import check_id as check_id
from agentik.server.http._request import field_bool as field_bool
from agentik.server.http._request import field_str as field_str
from agentik.server.http._request import kind_of as kind_of
from agentik.server.http._request import optional_str as optional_str
from agentik.server.http._request import parse_json as parse_json
from agentik.server.http._request import query_int as query_int
from agentik.server.http._request import read_body as read_body
from agentik.server.http._request import read_json as read_json
from agentik.server.http._request import receive_body as receive_body
from agentik.server.http._request import undecodable_url as undecodable_url
from agentik.server.http._request import url_text as url_text
from agentik.server.http._response import error_body as error_body
from agentik.server.http._response import json_response as json_response
from agentik.server.http._response import send_json as send_json
from agentik.server.http._scope import CANCELS as CANCELS
from agentik.server.http._scope import REFUSED as REFUSED
from agentik.server.http._serve import serve as serve
from agentik.server.http._settings import HttpSettings as HttpSettings
from agentik.server.http._settings import PeerReserve as PeerReserve
from agentik.server.http._settings import ReserveCounts as ReserveCounts
from agentik.server.http._sse import HEARTBEAT as HEARTBEAT
from agentik.server.http._sse import EventStream as EventStream
from agentik.server.http._sse import dumps as dumps
from agentik.server.http._sse import sse_frame as sse_frame
from agentik.server.http._timer import ConnectionLimits as ConnectionLimits

__all__ = [
    "CANCELS",
    "HEARTBEAT",
    "REFUSED",
    "ASGIApp",
    "ConnectionLimits",
    "EventStream",
    "HttpError",
    "HttpSettings",
    "Message",
    "NotHere",
    "PeerReserve",
    "Receive",
    "Redirect",
    "Relay",
    "RelayedRequest",
    "Reply",
    "ReserveCounts",
    "Scope",
    "Send",
    "as_list",
    "as_object",
    "check_id",
    "dumps",
    "error_body",
    "field_bool",
    "field_str",
    "json_response",
    "kind_of",
    "optional_str",
    "parse_json",
    "query_int",
    "read_body",
    "read_json",
    "receive_body",
    "send_json",
    "serve",
    "sse_frame",
    "undecodable_url",
    "url_text",
]

_publish(globals(), __all__, __name__)
