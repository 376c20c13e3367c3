/*
 * backends.c — the built-in storage backends and which one serves a URL
 * (backend_ops.h). The io (io.c) asks its run-time additions first, then
 * this table; the shard cache asks this table alone whether a URL is an
 * object store's, so it needs no io.
 *
 * Threading: immutable data and pure functions.
 */
#include "store/backend_ops.h"

/* In the order they are asked; the first that matches serves. */
const sio_backend_ops *const sio_backends[SIO_NBACKENDS] = {
    &sio_backend_objset, /* before file: its URLs are paths with a query */
    &sio_backend_file,
    &sio_backend_http,
    &sio_backend_s3,
};

const sio_backend_ops *sio_backend_for(const char *url)
{
    for (size_t i = 0; i < SIO_NBACKENDS; i++)
        if (sio_backends[i]->matches(url))
            return sio_backends[i];
    return NULL;
}
