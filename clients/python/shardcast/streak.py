"""What a retry streak tells the user: never a silent wait.

A streak is a run of failed attempts with no success in between (a
stream that broke or could not start, a replica that answers 503 while its
job resolves). Its first failure is logged at once, with the URL and the
reason; while it lasts, a line every LOG_EVERY seconds says how long and
how many attempts; when an attempt succeeds after it, a line says so.
Lines go to the "shardcast" logger at WARNING, which Python prints on
stderr even when the program configured no logging.
"""

import logging
import time

log = logging.getLogger("shardcast")

# Seconds between two lines of one streak.
LOG_EVERY = 10.0


class Streak:
    """The log lines of one consumer's retry streaks. `what` names the
    consumer in every line (e.g. "consumer 3 of 8 of job train")."""

    def __init__(self, what, every=LOG_EVERY, clock=time.monotonic):
        self.what = what
        self.every = every
        self.clock = clock
        self.start = None     # when the open streak began, None: none open
        self.attempts = 0
        self.last_line = None

    def failed(self, url, reason, next_in, budget=None, told=False):
        """An attempt at `url` failed with `reason`; the next one comes in
        `next_in` seconds (budget: a description of what is left, or None).
        told: the caller logged this failure itself (a failover line), so
        a new streak's first line is left out."""
        now = self.clock()
        self.attempts += 1
        left = ("; %s" % budget) if budget else ""
        if self.start is None:
            self.start = now
            self.last_line = now
            if not told:
                log.warning("shardcast: %s: %s failed: %s; retrying in %.1f s%s",
                            self.what, url, reason, next_in, left)
        elif now - self.last_line >= self.every:
            self.last_line = now
            log.warning("shardcast: %s: still retrying after %d attempts in %.0f s "
                        "(last, at %s: %s)%s", self.what, self.attempts, now - self.start,
                        url, reason, left)

    def succeeded(self, url):
        """An attempt at `url` succeeded: the end of an open streak is told."""
        if self.start is None:
            return
        log.warning("shardcast: %s: %s answered again after %d failed attempts in %.1f s",
                    self.what, url, self.attempts, self.clock() - self.start)
        self.start = None
        self.attempts = 0
        self.last_line = None

    @property
    def open(self):
        return self.start is not None


def first_line(e):
    """The first line of an error's text (its type's name when empty)."""
    text = str(e.args[0] if e.args else e)
    return text.splitlines()[0] if text.strip() else type(e).__name__
