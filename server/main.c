/*
 * main.c — shardcastd: settings, start-up, signals, drain, shutdown.
 *
 * Start-up: load settings (command line > SHARDCAST_* environment > config
 * file > defaults), raise RLIMIT_NOFILE to its hard limit (every consumer
 * is a socket), create the jobs of the command line and the config file,
 * give their sources up to STARTUP_RESOLVE_MS to resolve (a source that
 * does not resolve by then keeps being retried; /readyz says 503 until it
 * does), start the HTTP server and print exactly one line
 * "listening=ADDR:PORT" on stdout (IPv6 addresses in brackets) so that a
 * parent process started with --port 0 learns the real port.
 * SIGTERM/SIGINT drain: no new connections or streams, running streams get
 * --drain-grace seconds, the rest are cut with the error trailer; then the
 * process exits 0. The main thread only waits for those signals (sigwait),
 * with both blocked in every thread.
 * Exit codes: 0 clean stop, 1 start-up failure, 2 bad settings.
 */
#include <malloc.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "http.h"
#include "jobs.h"
#include "log.h"
#include "settings.h"
#include "shardio.h"

/* How long start-up waits for the configured sources to resolve before it
 * listens anyway (readiness then says why not ready). */
#define STARTUP_RESOLVE_MS 10000u

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t before = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            SC_LOG(SIO_LOG_WARN,
                   "event=rlimit_nofile_failed errno=%d reason=\"%s\"", errno,
                   strerror(errno));
    }
    SC_LOG(SIO_LOG_INFO, "event=rlimit_nofile before=%llu now=%llu",
           (unsigned long long)before, (unsigned long long)rl.rlim_cur);
}

int main(int argc, char **argv)
{
    /* One malloc arena: memory allocated on one thread and freed on
     * another fragments per-thread arenas, and peak RSS rose above the
     * buffers (measured: +10-20% on tests/contract/test_memory). Sample
     * memory no longer goes through malloc (the sample pool, shardio.h),
     * so the arena lock is off the per-sample path. */
    if (!getenv("MALLOC_ARENA_MAX")) /* an operator's choice wins */
        mallopt(M_ARENA_MAX, 1);
    sc_config cfg;
    char msg[600];
    sio_io *io = NULL;
    sc_jobs *jobs = NULL;
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
    sio_pool_configure((size_t)cfg.sample_pool_idle);
    sio_pool_set_decay(cfg.sample_pool_decay_ms);

    /* Block the stop signals before any thread exists so that every thread
     * inherits the mask and only sigwait below sees them. A client that
     * vanishes must not kill the process through SIGPIPE either. */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* From here on no thread waits on write(2) to log (log.h). */
    if (sc_log_start((size_t)cfg.log_queue_bytes) != 0)
        SC_LOG(SIO_LOG_WARN,
               "event=log_thread_failed reason=\"cannot start the logging "
               "thread: lines are written by the threads that log\"");
    SC_LOG(SIO_LOG_INFO, "event=start version=%s", SIO_VERSION_STRING);
    sc_settings_log(&cfg);
    raise_nofile();

    /* The object-store settings as loaded (the io scope), with our log. */
    sio_io_config iocfg = cfg.io;
    iocfg.log.fn = sc_log_sio;
    iocfg.log.level = cfg.log_level;
    if (sio_io_create(&iocfg, &io, &err) != SIO_OK) {
        char q[sizeof err.msg + 16];
        SC_LOG(SIO_LOG_ERROR, "event=startup_failed step=io code=%d reason=%s",
               err.code, sc_log_quote(q, sizeof q, err.msg, strlen(err.msg)));
        fprintf(stderr, "shardcastd: %s\n", err.msg);
        goto out;
    }
    if (sc_jobs_create(&cfg, io, &jobs, msg, sizeof msg) != SIO_OK) {
        fprintf(stderr, "shardcastd: %s\n", msg);
        goto out;
    }
    if (cfg.cli_job.name)
        sc_jobs_put(jobs, &cfg.cli_job, msg, sizeof msg);
    for (size_t i = 0; i < cfg.njobs; i++)
        sc_jobs_put(jobs, &cfg.jobs[i], msg, sizeof msg);
    sc_jobs_wait_resolved(jobs, STARTUP_RESOLVE_MS);

    if (sc_server_start(&cfg, io, jobs, &srv, msg, sizeof msg) != SIO_OK) {
        char q[sizeof msg + 16];
        SC_LOG(SIO_LOG_ERROR, "event=startup_failed step=http reason=%s",
               sc_log_quote(q, sizeof q, msg, strlen(msg)));
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
    SC_LOG(SIO_LOG_INFO, "event=stopping signal=%s drain_grace_s=%u",
           sig == SIGTERM ? "SIGTERM" : "SIGINT", cfg.drain_grace);
    size_t left = sc_server_drain(srv, cfg.drain_grace);
    if (left)
        SC_LOG(SIO_LOG_WARN, "event=drain_incomplete streams=%zu", left);
    rc = 0;
out:
    sc_server_stop(srv);
    if (sc_jobs_destroy(jobs) != 0) {
        /* A thread is stuck in object-store retries and uses io: leave
         * without freeing (and without exit handlers that would). */
        SC_LOG(SIO_LOG_INFO, "event=stopped");
        sc_log_stop();
        _exit(rc);
    }
    sio_io_destroy(io);
    if (sr == SC_SETTINGS_OK && rc == 0)
        SC_LOG(SIO_LOG_INFO, "event=stopped");
    sc_log_stop();
    sc_settings_free(&cfg);
    return rc;
}
