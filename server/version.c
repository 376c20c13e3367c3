/*
 * version.c — the server's version string (kept in the server library so
 * tests and the daemon report the same one).
 */
#include "shardio.h"

const char *shardcast_version(void);

const char *shardcast_version(void)
{
    return SIO_VERSION_STRING;
}
