/*
 * main.c — shardcastd: settings, start-up, signals, shutdown.
 *
 * Start-up: load settings (command line > SHARDCAST_* environment >
 * defaults), resolve the shard list once, start the HTTP server, print
 * exactly one line "listening=ADDR:PORT" on stdout (IPv6 addresses in
 * brackets) so that a parent process started with --port 0 learns the real
 * port. SIGTERM/SIGINT stop the server cleanly; the main thread only waits
 * for them (sigwait), with both signals blocked in every thread.
 * Exit codes: 0 clean stop, 1 start-up failure, 2 bad settings.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "log.h"
#include "settings.h"
#include "shardio.h"

int main(int argc, char **argv)
{
    sc_config cfg;
    char msg[600];
    sio_io *io = NULL;
    sio_shardlist *list = NULL;
    sc_server *srv = NULL;
    sio_error err = {SIO_OK, ""};
    sigset_t stop;
    int sig = 0, rc = 1;

    sc_settings_result sr =
        sc_settings_load(&cfg, argc, argv, stdout, msg, sizeof msg);
    if (sr != SC_SETTINGS_OK) {
        if (sr == SC_SETTINGS_ERROR)
            fprintf(stderr, "shardcastd: %s\n", msg);
        rc = sr == SC_SETTINGS_HELP ? 0 : 2;
        goto out;
    }
    sc_log_init(cfg.log_level);

    /* Block the stop signals before any thread exists so that every thread
     * inherits the mask and only sigwait below sees them. A client that
     * vanishes must not kill the process through SIGPIPE either. */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    SC_LOG(SIO_LOG_INFO, "event=start version=%s", SIO_VERSION_STRING);
    sc_settings_log(&cfg);

    sio_io_config iocfg;
    memset(&iocfg, 0, sizeof iocfg);
    iocfg.log.fn = sc_log_sio;
    iocfg.log.level = cfg.log_level;
    if (sio_io_create(&iocfg, &io, &err) != SIO_OK) {
        SC_LOG(SIO_LOG_ERROR, "event=startup_failed step=io code=%d", err.code);
        fprintf(stderr, "shardcastd: %s\n", err.msg);
        goto out;
    }
    if (sio_shardlist_resolve(io, cfg.source, &list, &err) != SIO_OK) {
        SC_LOG(SIO_LOG_ERROR, "event=startup_failed step=source code=%d",
               err.code);
        fprintf(stderr, "shardcastd: cannot resolve --source: %s\n", err.msg);
        goto out;
    }
    SC_LOG(SIO_LOG_INFO, "event=shards job=%s count=%zu", cfg.job,
           sio_shardlist_count(list));

    if (sc_server_start(&cfg, io, list, &srv, msg, sizeof msg) != SIO_OK) {
        SC_LOG(SIO_LOG_ERROR, "event=startup_failed step=http");
        fprintf(stderr, "shardcastd: %s\n", msg);
        goto out;
    }
    int v6 = strchr(cfg.listen, ':') != NULL;
    printf("listening=%s%s%s:%u\n", v6 ? "[" : "", cfg.listen, v6 ? "]" : "",
           (unsigned)sc_server_port(srv));
    fflush(stdout);
    SC_LOG(SIO_LOG_INFO, "event=listening addr=%s port=%u", cfg.listen,
           (unsigned)sc_server_port(srv));

    while (sigwait(&stop, &sig) != 0)
        ;
    SC_LOG(SIO_LOG_INFO, "event=stopping signal=%s",
           sig == SIGTERM ? "SIGTERM" : "SIGINT");
    rc = 0;
out:
    sc_server_stop(srv);
    sio_shardlist_free(list);
    sio_io_destroy(io);
    if (sr == SC_SETTINGS_OK && rc == 0)
        SC_LOG(SIO_LOG_INFO, "event=stopped");
    sc_settings_free(&cfg);
    return rc;
}
