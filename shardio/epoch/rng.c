/*
 * rng.c — the deterministic PRNG of the epoch contract.
 *
 * These functions are part of shardcast's public determinism contract
 * (docs/order.md, "The order of an epoch"): changing any of them changes every
 * epoch's order, so they are pinned by golden tests and must never change
 * silently.
 *
 *   seeding   SplitMix64 state x0 = seed ^ (0x9E3779B97F4A7C15 * (epoch+1))
 *             ^ (0xD1B54A32D192ED03 * stream); the four xoshiro256** words
 *             are the next four SplitMix64 outputs.
 *   generator xoshiro256** 1.0 (Blackman & Vigna).
 *   below(n)  rejection: draw r until r >= (2^64 - n) mod n, return r mod n.
 *   permute   Fisher-Yates from the top: for i = n-1 down to 1,
 *             j = below(i+1), swap(a[i], a[j]); a starts as 0..n-1.
 *
 * Pure functions of their arguments; no globals.
 */
#include "shardio.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sio_rng_seed(sio_rng *r, uint64_t seed, uint64_t epoch, uint64_t stream)
{
    uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (epoch + 1)) ^
                 (0xD1B54A32D192ED03ull * stream);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t sio_rng_next(sio_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t sio_rng_below(sio_rng *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
    for (;;) {
        uint64_t x = sio_rng_next(r);
        if (x >= threshold)
            return x % n;
    }
}

void sio_permute(sio_rng *r, uint32_t *perm, size_t n)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)sio_rng_below(r, (uint64_t)i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
