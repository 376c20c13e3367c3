/*
 * replicas.h — the replica set pieces of libshardcast_client that are pure
 * functions (clients/c/replicas.c): the failover candidates of a consumer,
 * and the comparison of the replicas' GET /v1/topology?job= answers behind
 * scc_replicas_verify (shardcast_client.h). Internal to the library; the
 * unit test (tests/unit/client/test_replicas.c) calls them directly.
 *
 * Threading: pure functions, no shared state.
 */
#ifndef SCC_REPLICAS_H
#define SCC_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

#include "shardcast_client.h"

/* Body bytes of one /v1/topology answer read at most. */
#define SCC_TOPOLOGY_BODY_MAX (64u * 1024u)
/* Bytes of the messages the check builds (the stream's errmsg). */
#define SCC_REPLICAS_MSG_MAX 4096u

/*
 * Candidate i (0 <= i < R) of the consumer with home replica J and local
 * rank l: i == 0 is J, then (J + 1 + ((l + i - 1) mod (R - 1))) mod R, so
 * that a dead replica's consumers spread over the others.
 */
uint32_t scc_candidate(uint32_t home, uint32_t local_rank, uint32_t replicas,
                       uint32_t i);

/*
 * Compare the answers of the R replicas of urls[] (base URLs; urls[k] is
 * given as replica k) to GET /v1/topology?job=JOB: bodies[k] is replica k's
 * 200 body, NUL-terminated, or NULL when it did not answer (notes[k] says
 * why, or NULL). SCC_OK with the common fingerprint in fp; SCC_ERR_CONFIG
 * (a replica in the wrong place, a clash, a different R or fingerprint,
 * or no fingerprint at all) or SCC_ERR_CONNECT (none answered), with the
 * detail in msg (len bytes).
 */
scc_code scc_replicas_compare(size_t nreplicas, const char *const *urls,
                              const char *const *bodies,
                              const char *const *notes, const char *job,
                              char fp[SCC_FINGERPRINT_MAX + 1], char *msg,
                              size_t len);

/* fp is 1..SCC_FINGERPRINT_MAX lowercase hex digits: 1, else 0. */
int scc_fingerprint_ok(const char *fp);

#endif /* SCC_REPLICAS_H */
