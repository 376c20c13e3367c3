"""Scale-out topology: which shardcast replica serves which consumer.

A job served by R replicas (shardcastd --replica J --replicas R, one pod
of a StatefulSet each) is split by the servers, not by the client:

  * replica J reads only the shards at positions p of the epoch's permuted
    shard order with p mod R == J, shuffles them in its own buffer and
    deals that part of the epoch to its own consumers; the R parts are
    disjoint and together hold every sample of the epoch once;
  * consumer c of W (c = rank * num_workers + worker_id, as everywhere in
    shardcast) is served by replica c mod R, as local rank c div R of a
    local world of size |{c' < W : c' mod R == J}|.

So every replica has at least one consumer only when W >= R: a replica
with none would read its part of the epoch for nobody, and its samples
would be missing from the run. `Topology.route` refuses W < R.

Each replica's part is a pure function of (dataset, seed, epoch, J, R),
so any replica count gives an exactly-once, reproducible epoch, and a
replica that restarts serves the same part again: its consumers resume
from their position (`start=`) and lose or repeat nothing. Any replica
serves any part (a stream with replica=J): while a replica is down its
consumers fail over to the others (shardcast.replicas.candidates). With the
even-drop partition each replica drops its own remainder: at most
(local world - 1) samples per replica and epoch.

Three ways to describe the replicas:
  Topology(["http://a:8080", "http://b:8080"])       explicit base URLs
  Topology.from_template("http://shardcast-{j}.shardcast-headless:8080", 3)
  Topology.discover("http://shardcast-0.shardcast-headless:8080",
                    template="http://shardcast-{j}.shardcast-headless:8080")
discover() asks one replica's GET /v1/topology for R (and checks that the
replica is the one the template names); with verify=True every replica is
asked and must report its own J and the same R (shardcast.replicas, which
ShardcastDataset also uses to check the job's fingerprint on every replica
and to fail a consumer over to another replica).

Standard library only; a Topology is immutable and safe to share between
threads and DataLoader worker processes.
"""

import collections
import http.client
import json
import urllib.parse

from .errors import ShardcastConnectionError, ShardcastHTTPError, ShardcastProtocolError

# The placeholder a template's replica number replaces.
PLACEHOLDER = "{j}"
# The most replicas a client accepts: shardcastd's own bound on --replicas.
MAX_REPLICAS = 65536
# Largest /v1/topology body read (a small JSON object).
MAX_TOPOLOGY_BODY = 64 * 1024
# Environment variables ShardcastDataset reads (see from_env).
ENV_URLS = "SHARDCAST_URLS"
ENV_TEMPLATE = "SHARDCAST_URL_TEMPLATE"
ENV_REPLICAS = "SHARDCAST_REPLICAS"

Route = collections.namedtuple("Route", "url replica local_rank local_world")
Route.__doc__ = """Where consumer c of W streams from: the base URL of replica
`replica`, where it is consumer `local_rank` of `local_world`."""


def _check_int(name, v, lo, hi=None):
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError("%s must be an int, not %r" % (name, v))
    if v < lo or (hi is not None and v > hi):
        raise ValueError("%s=%d out of range %d..%s" % (name, v, lo, "" if hi is None else hi))


def replica_of(consumer, replicas):
    """The replica serving consumer `consumer`: consumer mod replicas."""
    _check_int("consumer", consumer, 0)
    _check_int("replicas", replicas, 1, MAX_REPLICAS)
    return consumer % replicas


def local_world(replica, world, replicas):
    """Consumers of `world` served by replica `replica` of `replicas`:
    |{c < world : c mod replicas == replica}|."""
    _check_int("replicas", replicas, 1, MAX_REPLICAS)
    _check_int("replica", replica, 0, replicas - 1)
    _check_int("world", world, 1)
    return (world - replica + replicas - 1) // replicas if replica < world else 0


def route(consumer, world, replicas):
    """(replica, local rank, local world) of consumer `consumer` of `world`
    with `replicas` replicas. Raises ValueError when consumer >= world or
    world < replicas (a replica would have no consumer)."""
    _check_int("world", world, 1)
    _check_int("consumer", consumer, 0, world - 1)
    _check_int("replicas", replicas, 1, MAX_REPLICAS)
    if world < replicas:
        raise ValueError("world=%d consumers cannot cover replicas=%d: every replica "
                         "needs at least one consumer, or its part of the epoch is "
                         "never read (use at least %d consumers, or fewer replicas)"
                         % (world, replicas, replicas))
    j = consumer % replicas
    return j, consumer // replicas, local_world(j, world, replicas)


def _check_base_url(url):
    if not isinstance(url, str):
        raise ValueError("a replica URL must be a string, not %r" % (url,))
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("replica URL %r is not an http(s)://host[:port] URL" % (url,))
    if parts.query or parts.fragment:
        raise ValueError("replica URL %r must not have a query or fragment" % (url,))
    return url.rstrip("/")


def expand_template(template, replicas):
    """The R base URLs of a template with exactly one "{j}"."""
    if not isinstance(template, str) or template.count(PLACEHOLDER) != 1:
        raise ValueError("URL template %r must contain %s exactly once"
                         % (template, PLACEHOLDER))
    _check_int("replicas", replicas, 1, MAX_REPLICAS)
    return [template.replace(PLACEHOLDER, str(j)) for j in range(replicas)]


def fetch_topology(url, *, timeout=10.0, headers=None, job=None):
    """GET {url}/v1/topology (with job: ?job=NAME) and return (replica,
    replicas, document).

    Raises ShardcastConnectionError (cannot connect / read),
    ShardcastHTTPError (status other than 200; retry_after from a
    Retry-After header) or ShardcastProtocolError (not the JSON object
    {"replica": J, "replicas": R, ...} with 0 <= J < R, or a "job" object
    without a string fingerprint and an "order" object).
    """
    base = _check_base_url(url)
    parts = urllib.parse.urlsplit(base)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    target = parts.path + "/v1/topology"
    if job is not None:
        target += "?job=" + urllib.parse.quote(job, safe="")
    shown = base + target[len(parts.path):]
    conn = conn_cls(parts.netloc, timeout=timeout)
    try:
        try:
            conn.request("GET", target, headers=dict(headers or {}))
            resp = conn.getresponse()
            body = resp.read(MAX_TOPOLOGY_BODY + 1)
        except (OSError, http.client.HTTPException) as e:
            raise ShardcastConnectionError("GET %s: %s" % (shown, e)) from e
    finally:
        conn.close()
    if resp.status != 200:
        text = body[:512].decode("utf-8", "replace").strip()
        first = text.splitlines()[0] if text else ""
        reason = first[len("error:"):].strip() if first.startswith("error:") else text
        after = (resp.getheader("Retry-After") or "").strip()
        raise ShardcastHTTPError("GET %s: HTTP %d: %s" % (shown, resp.status, reason),
                                 status=resp.status, reason=reason, url=shown,
                                 retry_after=min(float(after), 600.0) if after.isdigit()
                                 else None)
    if len(body) > MAX_TOPOLOGY_BODY:
        raise ShardcastProtocolError("GET %s: body above %d bytes"
                                     % (shown, MAX_TOPOLOGY_BODY))
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ShardcastProtocolError("GET %s: not JSON: %s" % (shown, e)) from e
    if not isinstance(doc, dict):
        raise ShardcastProtocolError("GET %s: not a JSON object" % shown)
    j, r = doc.get("replica"), doc.get("replicas")
    for name, v in (("replica", j), ("replicas", r)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ShardcastProtocolError("GET %s: %r is not an integer"
                                         % (shown, name))
    if not 1 <= r <= MAX_REPLICAS or not 0 <= j < r:
        raise ShardcastProtocolError("GET %s: replica %d of %d is out of range"
                                     % (shown, j, r))
    jd = doc.get("job")
    if job is not None and jd is not None:
        if not isinstance(jd, dict) or not isinstance(jd.get("fingerprint"), str) \
                or not jd["fingerprint"] or not isinstance(jd.get("order"), dict):
            raise ShardcastProtocolError("GET %s: \"job\" is not an object with a "
                                         "fingerprint string and an order object: %r"
                                         % (shown, jd))
    return j, r, doc


class Topology:
    """The base URLs of the R replicas serving one shardcast deployment,
    in replica order (urls[j] is replica j)."""

    def __init__(self, urls):
        if isinstance(urls, str):
            raise ValueError("give a list of replica URLs, not one string")
        urls = [_check_base_url(u) for u in urls]
        if not 1 <= len(urls) <= MAX_REPLICAS:
            raise ValueError("need 1..%d replica URLs, got %d" % (MAX_REPLICAS, len(urls)))
        if len(set(urls)) != len(urls):
            raise ValueError("replica URLs must be distinct: %r" % (urls,))
        self._urls = tuple(urls)

    @classmethod
    def from_template(cls, template, replicas):
        """Replicas named by a template such as
        "http://shardcast-{j}.shardcast-headless:8080" (a StatefulSet's
        pods behind its headless Service), j = 0 .. replicas - 1."""
        return cls(expand_template(template, replicas))

    @classmethod
    def discover(cls, url, *, template=None, verify=False, timeout=10.0, headers=None):
        """Ask the replica at `url` for R (GET /v1/topology).

        Without a template, R must be 1 (the URL is the only replica);
        with one, the replicas are the template's R URLs and the answering
        replica must be the one the template names for its J. With
        verify=True every replica is asked and must answer its own J and
        the same R: this catches replicas started with a different
        --replicas (e.g. a StatefulSet scaled without its setting) and
        two replicas started with the same J; a replica that cannot be
        reached is skipped with a warning (shardcast.replicas). Such
        answers raise ShardcastConfigError (a ShardcastProtocolError).
        ShardcastDataset(verify=True) checks the same and the job's
        fingerprint before streaming.
        """
        j, r, _ = fetch_topology(url, timeout=timeout, headers=headers)
        if template is None:
            if r != 1:
                raise ShardcastProtocolError(
                    "%s is replica %d of %d: give the URL template of the replicas "
                    "(e.g. http://shardcast-{j}.shardcast-headless:8080)" % (url, j, r))
            topo = cls([url])
        else:
            topo = cls.from_template(template, r)
            # A Service URL may answer as any replica; only a URL that the
            # template names can be checked against the J it reports.
            asked = _check_base_url(url)
            if asked in topo.urls and topo.urls[j] != asked:
                raise ShardcastProtocolError(
                    "%s reports replica %d of %d, but the template names it replica %d"
                    % (url, j, r, topo.urls.index(asked)))
        if verify:
            from .replicas import verify_replicas
            verify_replicas(topo, None, timeout=timeout, headers=headers)
        return topo

    @classmethod
    def from_env(cls, default_url, environ):
        """The topology an environment describes, else the single replica
        default_url:
          SHARDCAST_URLS="http://a:8080,http://b:8080"     explicit list
          SHARDCAST_URL_TEMPLATE="http://shardcast-{j}...:8080" with
          SHARDCAST_REPLICAS=R                              a template
        """
        urls = (environ.get(ENV_URLS) or "").strip()
        template = (environ.get(ENV_TEMPLATE) or "").strip()
        if urls and template:
            raise ValueError("set %s or %s, not both" % (ENV_URLS, ENV_TEMPLATE))
        if urls:
            return cls([u.strip() for u in urls.split(",") if u.strip()])
        if template:
            text = (environ.get(ENV_REPLICAS) or "").strip()
            if not text.isdigit():
                raise ValueError("%s needs %s=<number of replicas>, got %r"
                                 % (ENV_TEMPLATE, ENV_REPLICAS, text))
            return cls.from_template(template, int(text))
        return cls([default_url])

    @property
    def urls(self):
        return self._urls

    @property
    def replicas(self):
        return len(self._urls)

    def route(self, consumer, world):
        """Route(url, replica, local_rank, local_world) of consumer
        `consumer` of `world` (see the module doc for the rule)."""
        j, local_rank, lw = route(consumer, world, self.replicas)
        return Route(self._urls[j], j, local_rank, lw)

    def __eq__(self, other):
        return isinstance(other, Topology) and self._urls == other._urls

    def __hash__(self):
        return hash(self._urls)

    def __repr__(self):
        return "Topology(%r)" % (list(self._urls),)
