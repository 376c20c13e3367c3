/*
 * peers.h — the other replicas of this server's set (--peers).
 *
 * Each replica of a set is told where all R replicas answer: a list of R
 * base URLs in replica order, or one URL template with "{j}" (the pods of
 * a StatefulSet behind a headless Service). A thread asks each of them
 * for GET /v1/topology every --peer-interval and compares:
 *   - a server that answers with this server's own replica number J but
 *     is not this process (its instance id differs): "conflict";
 *   - this process answering at another replica's URL: "conflict" (its J
 *     or the list is wrong);
 *   - another --replicas, another J than its place in the list, or a job
 *     whose fingerprint differs from this server's: "mismatch";
 *   - no answer: "down"; otherwise "ok" (or "self" for this process).
 * A conflict makes the server not ready (/readyz 503 with the reason):
 * two replicas serving the same part would duplicate every sample of it.
 * A mismatch is logged, counted and shown in /v1/topology but keeps the
 * server ready: a rolling update passes through it, and the clients
 * refuse a set that disagrees (they compare the fingerprints themselves).
 * Every change of a peer's state is logged (event=peer_state).
 *
 * Threading: one thread polls; the accessors take the module's mutex.
 */
#ifndef SC_PEERS_H
#define SC_PEERS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs.h"
#include "prom.h"
#include "settings.h"

/* Bytes of a topology answer read from a peer. */
#define SC_PEER_BODY_MAX (256u * 1024u)
/* Hex digits of a process's instance id. */
#define SC_INSTANCE_LEN 16u

typedef struct sc_peers sc_peers;


/* The module: an instance id for this process and, with cfg->peers, the
 * polling thread (started by sc_peers_start). NULL: out of memory. */
sc_peers *sc_peers_create(const sc_config *cfg, sc_jobs *jobs);
int sc_peers_start(sc_peers *p);
void sc_peers_destroy(sc_peers *p);

/* This process's instance id (SC_INSTANCE_LEN hex digits). */
const char *sc_peers_instance(const sc_peers *p);
/* 1 when no peer conflicts with this server; 0 with the reason. */
int sc_peers_ready(sc_peers *p, char *reason, size_t reason_len);
/* The peers' states as a JSON array (NULL without --peers). */
json_t *sc_peers_json(sc_peers *p);
/* Metric families shardcast_peers{state} and
 * shardcast_peer_conflicts_total. */
void sc_peers_metrics(sc_peers *p, sc_prom *pr);

#endif /* SC_PEERS_H */
