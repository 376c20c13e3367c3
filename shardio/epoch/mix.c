/*
 * mix.c — the quotas of a mixed epoch (docs/order.md "Mixing datasets").
 *
 * Pure arithmetic on the sources' specs and sizes; the same steps, in the
 * same order, are in tests/contract/reference.py (IEEE doubles give the
 * same results there).
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

/* 2^53: counts and products beyond it are not exact in a double. */
#define MIX_EXACT_MAX 9007199254740992.0
#define MIX_COUNT_MAX (UINT64_C(1) << 53)

sio_code sio_mix_quotas(const sio_mix_spec *specs, size_t n,
                        uint64_t epoch_size, const uint64_t *counts,
                        uint64_t *quotas, sio_error *err)
{
    uint64_t fixed = 0;
    size_t nweighted = 0;

    if (n == 0 || n > SIO_MIX_SOURCES_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "1..%u sources",
                          SIO_MIX_SOURCES_MAX);
    if (epoch_size > MIX_COUNT_MAX)
        return sio_seterr(err, SIO_ERR_INVALID, "epoch_size too large");
    for (size_t i = 0; i < n; i++) {
        const sio_mix_spec *sp = &specs[i];
        quotas[i] = 0;
        switch (sp->kind) {
        case SIO_MIX_CHOOSE:
            if (sp->choose > MIX_COUNT_MAX)
                return sio_seterr(err, SIO_ERR_INVALID,
                                  "source %zu: choose too large", i);
            quotas[i] = sp->choose;
            break;
        case SIO_MIX_REPEAT: {
            if (!(sp->value >= 0) || !(sp->value <= SIO_MIX_WEIGHT_MAX))
                return sio_seterr(err, SIO_ERR_INVALID,
                                  "source %zu: repeat must be in [0, 2^20]",
                                  i);
            if (!counts || counts[i] == UINT64_MAX)
                return sio_seterr(err, SIO_ERR_AGAIN,
                                  "source %zu: repeat needs its sample count "
                                  "(an index of every shard)", i);
            double q = floor(sp->value * (double)counts[i] + 0.5);
            if (q > MIX_EXACT_MAX)
                return sio_seterr(err, SIO_ERR_INVALID,
                                  "source %zu: repeat gives too many samples",
                                  i);
            quotas[i] = (uint64_t)q;
            break;
        }
        case SIO_MIX_WEIGHT:
            if (!(sp->value >= SIO_MIX_WEIGHT_MIN) ||
                !(sp->value <= SIO_MIX_WEIGHT_MAX))
                return sio_seterr(err, SIO_ERR_INVALID,
                                  "source %zu: weight must be in [2^-20, "
                                  "2^20]", i);
            nweighted++;
            continue;
        default:
            return sio_seterr(err, SIO_ERR_INVALID, "source %zu: bad kind",
                              i);
        }
        if (fixed + quotas[i] < fixed)
            return sio_seterr(err, SIO_ERR_INVALID, "quotas overflow");
        fixed += quotas[i];
    }
    if (nweighted == 0) {
        if (epoch_size && epoch_size != fixed)
            return sio_seterr(err, SIO_ERR_INVALID,
                              "epoch_size %" PRIu64 " is not the sum of the "
                              "sources' samples (%" PRIu64 "); give one a "
                              "weight", epoch_size, fixed);
        return SIO_OK;
    }
    if (!epoch_size)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "weights need an epoch_size");
    if (fixed > epoch_size)
        return sio_seterr(err, SIO_ERR_INVALID,
                          "epoch_size %" PRIu64 " is below the fixed "
                          "quotas (%" PRIu64 ")", epoch_size, fixed);
    /* Largest remainder, in integers: each weight as an integer in units
     * of 2^-32 (floor(w * 2^32 + 0.5)), share_i = rest * w_i / W floored,
     * then one more to the largest remainders (rest * w_i mod W; ties:
     * the lower source) until the shares add up to rest. */
    uint64_t rest = epoch_size - fixed, given = 0, wtot = 0;
    uint64_t *wi = calloc(n, sizeof *wi), *rem = calloc(n, sizeof *rem);
    if (!wi || !rem) {
        free(wi);
        free(rem);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (specs[i].kind == SIO_MIX_WEIGHT) {
            wi[i] = (uint64_t)floor(specs[i].value * 4294967296.0 + 0.5);
            wtot += wi[i];
        }
    for (size_t i = 0; i < n; i++) {
        if (specs[i].kind != SIO_MIX_WEIGHT)
            continue;
        unsigned __int128 prod = (unsigned __int128)rest * wi[i];
        quotas[i] = (uint64_t)(prod / wtot);
        rem[i] = (uint64_t)(prod % wtot);
        given += quotas[i];
    }
    while (given < rest) { /* fewer rounds than weighted sources */
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (specs[i].kind == SIO_MIX_WEIGHT && rem[i] != UINT64_MAX &&
                (best == n || rem[i] > rem[best]))
                best = i;
        quotas[best]++;
        rem[best] = UINT64_MAX; /* had its one */
        given++;
    }
    free(wi);
    free(rem);
    return SIO_OK;
}
