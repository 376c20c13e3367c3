/*
 * names.h — the rules of the names, lists and limits that requests,
 * settings and job specs share: job names, field lists, the longest
 * request target. Both server/request.c (the
 * HTTP side) and server/settings.c (the configuration side) use them; they
 * use neither.
 */
#ifndef SC_NAMES_H
#define SC_NAMES_H

#include <stddef.h>

#include "shardio_wire.h"

/* A job name: at most this many bytes (after percent-decoding). */
#define SC_JOB_NAME_MAX 128u
/* The job-name rule, the one every job name passes (request paths, job
 * specs, --job): 1..SC_JOB_NAME_MAX bytes of [A-Za-z0-9._-]. */
int sc_job_name_valid(const char *name);
/* May c appear in a job name? */
int sc_job_name_char(int c);

/* The longest request target the parser accepts (callers may set lower). */
#define SC_TARGET_MAX 65536u

/* Check a comma-separated field list: 1..SIO_TARW_FILTER_MAX distinct
 * names of 1..SIO_TARW_FIELD_NAME_MAX bytes of [A-Za-z0-9._+-]. Writes the
 * lowercased names into names[i] (each SIO_TARW_FIELD_NAME_MAX+1 bytes) and
 * their count into *n. Returns 0, or -1 when the list is invalid. */
int sc_fields_split(const char *list,
                    char names[][SIO_TARW_FIELD_NAME_MAX + 1], size_t *n);

#endif /* SC_NAMES_H */
