/*
 * group.h — the WebDataset grouping rule (internal), the one copy every
 * reader of a shard follows: the shard reader (shard.c: first passes,
 * index builds, zip shards, the tar tap), and the plan's reader
 * (plan/planread.c), which reads a group back at its indexed range and
 * must find exactly the sample the index builder found there.
 *
 * The rule:
 *  - a member is skipped when it is not a regular file, has no
 *    "<key>.<ext>" name (sio_split_key), is a top-level "__*__" name, or a
 *    name of SIO_TARP_NAME_MAX bytes or more;
 *  - consecutive members with the same key make one sample; its field
 *    names are the extensions, lower-cased;
 *  - a sample is bad (delivered by no reader) when an extension repeats,
 *    or a member or the sample exceeds the limits (member_max,
 *    sample_max, fields_max);
 *  - a header dropped for a bad checksum between or inside groups makes
 *    the group whose member it began bad; whose it was is told from its
 *    name only where everything around agrees (sio_group_damage_owner).
 *
 * A sio_group holds the open group: its key, the extension of every
 * member (kept or not, so every reader decides alike whatever it keeps),
 * the fields kept, their bytes, and why it is bad.
 *
 * Threading: one group, one thread.
 */
#ifndef SHARDIO_GROUP_H
#define SHARDIO_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"
#include "tar/tarparse.h"

/* Is this member skipped by the rule (not a regular file, a top-level
 * __*__ name, no extension, a name too long)? Else *keylen is the length
 * of its key. */
int sio_tar_skip_member(const sio_tar_entry *e, size_t *keylen);

/* Room for the extensions of one group's members. */
#define SIO_GROUP_GX_MAX 1024

typedef struct sio_group {
    int open;            /* a group is open (key set) */
    char *key;           /* its key (NUL-terminated) */
    size_t keylen, keycap;
    char gx[SIO_GROUP_GX_MAX]; /* every member's extension, NUL-separated */
    size_t gxlen;
    int gxover;          /* gx could not hold them all */
    char *names;         /* the kept fields' names, NUL-separated */
    size_t nlen, ncap;
    uint32_t nf;         /* fields kept */
    uint64_t dlen;       /* their bytes */
    int bad;             /* the group is bad: reason says why */
    char reason[320];
} sio_group;

/* What a member's header is to the open group (sio_group_member). */
enum {
    SIO_GROUP_SKIP = 0,  /* not a member of any sample */
    SIO_GROUP_NEXT = 1,  /* another key: the open group ends before it */
    SIO_GROUP_MEMBER = 2 /* a member of the open group (opened by it when
                            none was): *ext is its field name */
};

/* Size of an ext buffer sio_group_member fills. */
#define SIO_GROUP_EXT_MAX SIO_TARP_NAME_MAX

/* The limits with the defaults in place of zeros (SIO_*_MAX_DEFAULT). */
void sio_group_limits(sio_shard_limits *lim);

void sio_group_init(sio_group *g);
void sio_group_free(sio_group *g);
/* Close the open group: the next member opens one. */
void sio_group_reset(sio_group *g);

/* Take member e's header. SIO_GROUP_MEMBER: *ext (SIO_GROUP_EXT_MAX
 * bytes) gets its lower-case extension and, with *first, it opened the
 * group; the caller then asks sio_group_field whether its data is kept.
 * -1: out of memory (the key). */
int sio_group_member(sio_group *g, const sio_tar_entry *e, char *ext,
                     int *first);
/* Is the member just taken (extension ext, size bytes) a field of the
 * sample? 1: yes, its name at g->names + *name_off (offsets stay valid,
 * the base may move); 0: no, the group is bad (a repeated extension, a
 * limit passed; g->reason says which) or was already. With size
 * SIO_GROUP_SIZE_UNKNOWN (a zip entry whose size its header does not give)
 * only its name is checked: sio_group_grow adds the bytes once read. -1:
 * out of memory. */
#define SIO_GROUP_SIZE_UNKNOWN UINT64_MAX
int sio_group_field(sio_group *g, const char *ext, uint64_t size,
                    const sio_shard_limits *lim, size_t *name_off);
/* The last field, of unknown size, is len bytes: 0, or -1 when that
 * passes a limit (the group is bad then). */
int sio_group_grow(sio_group *g, uint64_t len, const sio_shard_limits *lim);

/* Has the open group a member of extension ext (lower case)? 1, 0, or -1
 * when that is not known (too many members to note). */
int sio_group_has_ext(const sio_group *g, const char *ext);

/*
 * A damaged header: `name` as the tar reader read it from the dropped
 * block (its dmg_name), believed only with `known` (one damaged header
 * since the last member taken, and exactly its header and the data its
 * size gives were dropped). Its key length and lower-case extension
 * (SIO_TARP_DMG_NAME_MAX + 1 bytes) when it reads as a member's name: 0,
 * else -1.
 */
int sio_group_damage_name(const char *name, int known, size_t *kl,
                          char *ext);
/*
 * A damaged header lies between the open group and the next one (key
 * `next`, whose first header follows it; NULL at the archive's end).
 * Whose member did it begin? 1: the open group's (*ext: its extension,
 * which the next group must then have); 2: the next group's; 3: neither's,
 * a sample of its own (one member, key length *kl: the next group must
 * have a member of *ext as well); 0: unknown (both are taken as bad).
 * Believed only where everything around agrees with it:
 *  - the open group's: the group has no member of its extension yet (a
 *    sample holds one member per extension), so a member is missing
 *    there; and the next group must turn out to have one (else a key
 *    damaged into the open group's may hide that the member was the next
 *    group's: both are bad then);
 *  - the next group's: the open group already has a member of its
 *    extension, so that one is not missing there;
 *  - neither's: both groups have a member of its extension (the next one
 *    checked when it closes), so it was not theirs.
 */
int sio_group_damage_owner(const sio_group *g, const char *name, int known,
                           const char *next, size_t nextlen, size_t *kl,
                           char *ext);
/*
 * A reader bounded at the open group's indexed end met a damaged header
 * after the group's last member and then that end: did the index builder
 * take it for the next group's first member (owner 2)? Agree where this
 * reader can check it: its name reads, with another key, and the group
 * has a member of its extension.
 */
int sio_group_damage_after(const sio_group *g, const char *name, int known);

#endif
