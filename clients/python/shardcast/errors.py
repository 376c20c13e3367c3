"""Exceptions raised by the shardcast client.

Every exception takes a single message argument (other details are keyword
arguments with defaults), so that PyTorch's DataLoader can re-raise it with
its own type in the main process when it happened in a worker.

The attributes (status, reason, retryable, retry_after, attempts, key,
field) cross process boundaries too:
  * pickling keeps the whole __dict__ (multiprocessing, a result queue);
  * a DataLoader worker does not pickle the exception: torch re-creates it
    in the main process as `cls(text)` from the formatted traceback. So
    str() of an exception ends with one line `[shardcast-error {json}]`
    holding its attributes, and the constructor, given a text that contains
    such a line, takes the attributes back from the last one.
"""

import json

# The tag of the attribute line in str(exception); see the module doc.
ATTR_TAG = "[shardcast-error "
# Attributes carried in that line, when set (not None).
CARRIED = ("status", "reason", "url", "retry_after", "retryable", "attempts", "key",
           "field")


def _carried_from(text):
    """{attribute: value} from the last attribute line in text, or {}."""
    i = text.rfind(ATTR_TAG)
    if i < 0:
        return {}
    try:
        attrs, _ = json.JSONDecoder().raw_decode(text, i + len(ATTR_TAG))
    except ValueError:
        return {}
    if not isinstance(attrs, dict):
        return {}
    return {k: v for k, v in attrs.items() if k in CARRIED}


class ShardcastError(Exception):
    """Base class of every error the shardcast client raises."""

    def __init__(self, *args):
        super().__init__(*args)
        self._adopt()

    def _adopt(self):
        """Take the attributes back from a message re-created by a DataLoader."""
        if self.args and isinstance(self.args[0], str):
            for k, v in _carried_from(self.args[0]).items():
                setattr(self, k, v)

    def __str__(self):
        text = super().__str__()
        if ATTR_TAG in text:
            return text
        attrs = {k: getattr(self, k) for k in CARRIED
                 if isinstance(getattr(self, k, None), (str, int, float, bool))}
        if not attrs:
            return text
        return "%s\n%s%s]" % (text, ATTR_TAG, json.dumps(attrs, sort_keys=True))

    def __reduce__(self):
        # (class, args, state): unpickling calls cls(*args) and then
        # updates __dict__ with state, so every attribute survives.
        return (self.__class__, self.args, self.__dict__)


class ShardcastConnectionError(ShardcastError, ConnectionError):
    """The server could not be reached, or the connection failed before a
    response status arrived (refused, reset, DNS, timeout)."""


class ShardcastHTTPError(ShardcastError):
    """The server answered with an HTTP error status instead of a stream.

    Attributes: status (int), reason (the server's one-line `error:` text,
    or the HTTP reason phrase when the body had none), url, retry_after
    (seconds from a Retry-After header in delay-seconds form, else None).
    """

    def __init__(self, message, *, status=None, reason=None, url=None,
                 retry_after=None):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.url = url
        self.retry_after = retry_after
        self._adopt()


class ShardcastStreamError(ShardcastError):
    """The server reported an error after the stream had started (an
    `__shardcast_error__` member or an ERROR frame).

    Attributes: reason (the server's text); retryable (True when the server
    asks the consumer to come back and resume, e.g. it is draining for a
    restart; ShardcastDataset then retries within its budget); retry_after
    (seconds the server asks to wait before coming back, or None).
    """

    def __init__(self, message, *, reason=None, retryable=False, retry_after=None):
        super().__init__(message)
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after
        self._adopt()


class ShardcastIncompleteError(ShardcastError):
    """The stream stopped without the `__shardcast_end__` member: the
    connection was cut, timed out, or the body ended early. The samples
    already delivered are valid, but the share is not complete."""


class ShardcastProtocolError(ShardcastError):
    """The response is not a well-formed shardcast tar stream (bad member
    names, missing headers, a trailer that does not match what was sent,
    or a member over the client's size limit)."""


class ShardcastConfigError(ShardcastProtocolError):
    """The replicas are not set up as one service, so streaming would lose
    or repeat samples; never retried. Raised when the replicas' answers to
    GET /v1/topology?job=NAME contradict each other or the client's replica
    list (two replicas report the same J, a replica reports another J or R
    than its place in the list, the job's settings differ between
    replicas: different fingerprints), or when a stream's header names
    another fingerprint or part than verified and requested. The message
    names the replicas (URL, J, R) and the settings that differ, with each
    replica's value. A subclass of ShardcastProtocolError, which
    Topology.discover(verify=True) raised for such answers before."""


class ShardcastDecodeError(ShardcastError, ValueError):
    """A field decoder (decode=) failed. Attributes: key (the sample's key)
    and field (the extension)."""

    def __init__(self, message, *, key=None, field=None):
        super().__init__(message)
        self.key = key
        self.field = field
        self._adopt()
