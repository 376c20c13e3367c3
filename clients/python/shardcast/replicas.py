"""Replicas as one service: checking that they are set up alike, and the
order in which a consumer's part fails over to the other replicas.

Verification (ShardcastDataset(verify=True), the default, and
Topology.discover(verify=True)): before its first stream, a dataset copy
asks every replica GET {url}/v1/topology?job=NAME. A replica that cannot
be reached (connection refused, reset, timeout) is skipped with a warning
on the "shardcast" logger; a 502/503/504 (503: the job is still resolving
on that replica) is asked again within the retry budget. Then:

  * each answering urls[k] must report replica == k and replicas ==
    len(urls) (two replicas that report the same J are named together:
    "http://a and http://b both report replica 0 of 2");
  * all the job's fingerprints must be equal; when they are not, the
    "order" objects (the settings that fix the epochs' order: seed,
    shards, shuffle buffer, partition, ...) are compared key by key and
    every key that differs is named with each replica's value
    ("seed: http://a=0, http://b=5").

Any of these raises ShardcastConfigError (never retried). A replica whose
answer has no "job" object (a server that predates fingerprints, which
answers ?job= with 400 "unknown parameter job" and is then asked without
it) is checked for J and R only.

Every stream's header (frames HEADER keys, or the tar stream's pax global
header records SHARDCAST.fingerprint / .replica / .replicas / .served_by)
must then name the verified fingerprint and the part requested
(check_stream_ident); a header without them (an older server) is
accepted.

Failover: consumer c of W has home replica J = c mod R and local rank l =
c div R (topology.route). Its candidates are candidates(J, l, R): home
first, then (J + 1 + ((l + i) mod (R - 1))) mod R for i = 0 .. R-2, which
spreads the consumers of a dead replica over the other replicas. Each
failure moves the consumer to the next candidate, round robin, home
included, so a home that is back is tried again. A non-home candidate is
asked for part J with `replica=J` and the same local rank and world.

Standard library only.
"""

import collections
import json
import logging
import random
import time

from .errors import ShardcastConfigError, ShardcastConnectionError, ShardcastHTTPError
from .streak import first_line

log = logging.getLogger("shardcast")

# HTTP statuses of GET /v1/topology asked again within the retry budget.
RETRY_STATUSES = (502, 503, 504)
# Upper bound of the backoff between two topology requests (as for streams).
MAX_BACKOFF = 5.0
# The identity keys of a stream header (frames HEADER JSON; tar global
# header records with the prefix "SHARDCAST.").
IDENT_KEYS = ("fingerprint", "replica", "replicas", "served_by")

Answer = collections.namedtuple("Answer", "index url replica replicas fingerprint order")
Answer.__doc__ = """One replica's answer to GET /v1/topology[?job=NAME]: urls[index]
reports replica `replica` of `replicas`; fingerprint and order are None
when the answer has no "job" object (no job asked, or an older server)."""

Identity = collections.namedtuple("Identity", "fingerprint order answers skipped")
Identity.__doc__ = """What verify_replicas() established: the job's fingerprint
and "order" object shared by every answering replica (None when none
stated one), the answers, and the replicas skipped [(index, url, why)]."""


def candidates(home, local_rank, replicas):
    """The replicas a consumer with home replica `home` and local rank
    `local_rank` streams from, in the order it tries them: home first,
    then (home + 1 + ((local_rank + i) mod (replicas - 1))) mod replicas
    for i = 0 .. replicas - 2."""
    if not 1 <= replicas or not 0 <= home < replicas or local_rank < 0:
        raise ValueError("need 0 <= home < replicas and local_rank >= 0")
    if replicas == 1:
        return [home]
    return [home] + [(home + 1 + ((local_rank + i) % (replicas - 1))) % replicas
                     for i in range(replicas - 1)]


def _show(v):
    if v is _ABSENT:
        return "(absent)"
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


_ABSENT = object()


def _join(names):
    names = list(names)
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def order_differences(answers):
    """["key: url=value, url=value", ...] for each "order" key whose value
    is not the same at every answer (answers with an order object)."""
    have = [a for a in answers if isinstance(a.order, dict)]
    keys = []
    for a in have:
        for k in a.order:
            if k not in keys:
                keys.append(k)
    out = []
    for k in keys:
        vals = [a.order.get(k, _ABSENT) for a in have]
        if any(v != vals[0] for v in vals[1:]) or any(v is _ABSENT for v in vals):
            out.append("%s: %s" % (k, ", ".join("%s=%s" % (a.url, _show(v))
                                                for a, v in zip(have, vals))))
    return out


def check_answers(urls, job, answers, skipped=()):
    """The Identity of the answers, or ShardcastConfigError naming every
    way in which they contradict each other or the URL list (see the
    module doc)."""
    n = len(urls)
    problems = []
    by_j = collections.OrderedDict()
    for a in answers:
        by_j.setdefault(a.replica, []).append(a)
    for j, group in by_j.items():
        if len(group) > 1:
            problems.append("%s %s report replica %d of %s" % (
                _join(a.url for a in group), "both" if len(group) == 2 else "all", j,
                "/".join(str(r) for r in sorted({a.replicas for a in group}))))
    for a in answers:
        if (a.replica, a.replicas) != (a.index, n):
            text = "%s reports replica %d of %d, expected replica %d of %d" % (
                a.url, a.replica, a.replicas, a.index, n)
            if a.replicas > n:
                text += (" (the client was given %d replica URL%s: give every replica's "
                         "URL, in replica order)" % (n, "" if n == 1 else "s"))
            elif a.replicas < n:
                text += " (started with --replicas %d, the client was given %d URLs)" % (
                    a.replicas, n)
            problems.append(text)
    fps = collections.OrderedDict()
    for a in answers:
        if a.fingerprint is not None:
            fps.setdefault(a.fingerprint, []).append(a.url)
    if len(fps) > 1:
        diffs = order_differences([a for a in answers if a.fingerprint is not None])
        problems.append("the job's settings differ between replicas (%s)%s" % (
            "; ".join("fingerprint %s at %s" % (fp, ", ".join(us)) for fp, us in fps.items()),
            ": " + "; ".join(diffs) if diffs else
            " although their order settings read the same"))
    if problems:
        seen = ", ".join("%s (replica %d of %d)" % (a.url, a.replica, a.replicas)
                         for a in answers)
        if skipped:
            seen += "; not reached: " + ", ".join(u for _, u, _ in skipped)
        raise ShardcastConfigError(
            "the shardcast replicas%s are not set up as one service: %s. Replicas asked "
            "(URL list order = replica order): %s" % (
                " of job %r" % job if job else "", "; ".join(problems), seen))
    fp = next(iter(fps), None)
    order = next((a.order for a in answers if a.fingerprint == fp and fp is not None), None)
    return Identity(fp, order, tuple(answers), tuple(skipped))


def _answer(index, url, j, r, doc, job):
    fp = order = None
    if job is not None:
        jd = doc.get("job")
        if isinstance(jd, dict):
            fp, order = jd.get("fingerprint"), jd.get("order")
    return Answer(index, url, j, r, fp, order)


def _delay(backoff, failures, advice):
    delay = min(MAX_BACKOFF, backoff * (2 ** (failures - 1))) * random.uniform(0.75, 1.25)
    if advice is not None and advice > delay:
        delay = advice * random.uniform(1.0, 1.25)
    return delay


def verify_replicas(topology, job=None, *, timeout=10.0, headers=None, retries=30,
                    retry_timeout=120.0, backoff=0.25, sleep=time.sleep):
    """Ask every replica of `topology` GET /v1/topology?job=NAME (no
    query without a job) and check the answers (see the module doc).
    Returns an Identity; raises ShardcastConfigError for replicas that are
    not set up alike, ShardcastHTTPError for a final status (404: a replica
    does not know the job) or when 502/503/504 last past the retry budget
    (`retries` attempts in a row without an answer, `retry_timeout`
    seconds from the first failure), ShardcastProtocolError for a
    malformed answer."""
    from .topology import fetch_topology
    from .streak import Streak
    answers, skipped = [], []
    failures, streak_start = 0, None
    for k, url in enumerate(topology.urls):
        ask = job
        streak = Streak("checking replica %d of job %s" % (k, job))
        while True:
            try:
                j, r, doc = fetch_topology(url, timeout=timeout, headers=headers, job=ask)
            except ShardcastConnectionError as e:
                log.warning("shardcast: replica %d (%s) did not answer GET /v1/topology, "
                            "not verified: %s", k, url, e)
                skipped.append((k, url, str(e)))
                break
            except ShardcastHTTPError as e:
                if e.status == 400 and ask is not None and \
                        "unknown parameter" in (e.reason or ""):
                    ask = None  # a server that predates ?job=: J and R only
                    continue
                if e.status not in RETRY_STATUSES:
                    raise
                now = time.monotonic()
                if streak_start is None:
                    streak_start = now
                failures += 1
                delay = _delay(backoff, failures, getattr(e, "retry_after", None))
                spent = None
                if failures > retries:
                    spent = "attempts"
                elif retry_timeout is not None and now + delay - streak_start > retry_timeout:
                    spent = "time"
                if spent is not None:
                    e.args = ("%s (gave up after %d attempts in %.1f s: retry budget of %d "
                              "attempts / %s s spent on %s)"
                              % (e.args[0] if e.args else e, failures, now - streak_start,
                                 retries, retry_timeout, spent),) + e.args[1:]
                    e.attempts = failures
                    raise
                streak.failed(url, first_line(e), delay,
                              "attempt %d of %d, retry_timeout %s s" % (failures, retries,
                                                                         retry_timeout))
                sleep(delay)
                continue
            streak.succeeded(url)
            answers.append(_answer(k, url, j, r, doc, job))
            failures, streak_start = 0, None
            break
    return check_answers(topology.urls, job, answers, skipped)


def ident_from_header(h):
    """The identity keys of a frames HEADER (a dict), or None when it has
    no fingerprint (an older server)."""
    if "fingerprint" not in h:
        return None
    return {k: h.get(k) for k in IDENT_KEYS}


def ident_from_pax(records):
    """The identity of a tar stream's pax global header records (a dict of
    strings), or None when it has no SHARDCAST.fingerprint."""
    if "SHARDCAST.fingerprint" not in records:
        return None
    out = {"fingerprint": records["SHARDCAST.fingerprint"]}
    for k in IDENT_KEYS[1:]:
        v = records.get("SHARDCAST." + k)
        try:
            out[k] = int(v) if v is not None else None
        except ValueError:
            out[k] = v   # reported as a mismatch by check_stream_ident
    return out


def check_stream_ident(ident, *, url, fingerprint, part, replicas, served=None):
    """ShardcastConfigError when a stream's identity (ident_from_header /
    ident_from_pax, not None) does not name `fingerprint` (None: not
    checked) and part `part` of `replicas`; served: the replica the
    client connected to (only named in the message)."""
    problems = []
    fp = ident.get("fingerprint")
    if not isinstance(fp, str) or not fp:
        problems.append("fingerprint %r is not a string" % (fp,))
    elif fingerprint is not None and fp != fingerprint:
        problems.append("fingerprint %s, but the replicas verified %s (the replica's job "
                        "settings changed, or it belongs to another set)" % (fp, fingerprint))
    if ident.get("replica") != part:
        problems.append("it serves part %r, the client asked for replica %d's part"
                        % (ident.get("replica"), part))
    if ident.get("replicas") is not None and ident.get("replicas") != replicas:
        problems.append("it reports %r replicas, the client has %d"
                        % (ident.get("replicas"), replicas))
    if problems:
        by = ident.get("served_by")
        raise ShardcastConfigError(
            "stream %s (%sserved by replica %s) does not belong to the verified replica "
            "set: %s" % (url, "" if served is None else "asked of replica %d, " % served,
                         by, "; ".join(problems)))
