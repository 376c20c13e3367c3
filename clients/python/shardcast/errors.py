"""Exceptions raised by the shardcast client.

Every exception takes a single message argument (other details are keyword
arguments with defaults), so that PyTorch's DataLoader can re-raise it with
its own type in the main process when it happened in a worker.
"""


class ShardcastError(Exception):
    """Base class of every error the shardcast client raises."""


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


class ShardcastIncompleteError(ShardcastError):
    """The stream stopped without the `__shardcast_end__` member: the
    connection was cut, timed out, or the body ended early. The samples
    already delivered are valid, but the share is not complete."""


class ShardcastProtocolError(ShardcastError):
    """The response is not a well-formed shardcast tar stream (bad member
    names, missing headers, a trailer that does not match what was sent,
    or a member over the client's size limit)."""


class ShardcastDecodeError(ShardcastError, ValueError):
    """A field decoder (decode=) failed. Attributes: key (the sample's key)
    and field (the extension)."""

    def __init__(self, message, *, key=None, field=None):
        super().__init__(message)
        self.key = key
        self.field = field
