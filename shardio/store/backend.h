/*
 * backend.h — the store's internal headers in one include, for the parts
 * of libshardio outside store/ (tar/, epoch/, wire/, core/) that use both
 * the backend interface and the store internals. Files in store/ include
 * what they use:
 *  - store/backend_ops.h: the operations table a backend implements and
 *    the streams it opens;
 *  - store/store_int.h: error setting, logging, limits, object lists, the
 *    io's accessors.
 */
#ifndef SHARDIO_BACKEND_H
#define SHARDIO_BACKEND_H

#include "store/backend_ops.h"
#include "store/store_int.h"

#endif /* SHARDIO_BACKEND_H */
