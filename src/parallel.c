/* A small persistent thread pool (parallel.h).
 *
 * Workers sleep on a condition variable; a call publishes (fn, ctx, chunks)
 * under the pool mutex with a new generation number, runs chunk 0 itself,
 * and waits until the workers have finished the rest.  One call at a time
 * owns the pool (pool_owner is taken with trylock); any other call, from
 * another thread or nested inside a task, runs the same chunks serially in
 * its caller, so results never depend on whether the pool was free.
 *
 * fork: a child process has only the thread that forked, so the workers
 * the pool counts do not exist there, and a child that waited for them
 * hung in its first forward pass.  pthread_atfork handlers (registered
 * with the first worker) take every lock of the pool before the fork, so
 * that no call is in flight and no lock is held by a thread that will not
 * exist, release them in the parent, and in the child forget the workers:
 * the child starts its own on its first parallel call.  OpenBLAS is left
 * to its own fork handling (it runs single-threaded inside the pool; its
 * own atfork handler takes care of any threads it has).  The child frees
 * the workspaces of the threads it did not inherit (workspace.c).
 */
#include <pthread.h>
#include <unistd.h>

#include "gemm.h"
#include "parallel.h"
#include "workspace.h"
#include "transformer/module.h"

#define TFM_MAX_THREADS 64

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static int n_threads;                   /* 0 until first use */

static pthread_mutex_t pool_owner = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;
static int n_workers;                   /* started so far */
static uint64_t generation;
static int pending;

static struct {
    tfm__range_fn fn;
    void *ctx;
    int64_t n;
    int chunks;
} job;

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > TFM_MAX_THREADS ? TFM_MAX_THREADS : (int)n;
}

static int threads(void)
{
    pthread_mutex_lock(&config_lock);
    if (n_threads == 0) {
        n_threads = default_threads();
        tfm__blas_single_thread();
    }
    int n = n_threads;
    pthread_mutex_unlock(&config_lock);
    return n;
}

/* The calling thread's pin: depth of nested TFM__PLAN_PIN blocks, and the
 * plan the outermost one took. */
static _Thread_local int pin_depth;
static _Thread_local tfm__plan pinned_plan;

tfm__plan tfm__plan_now(void)
{
    if (pin_depth > 0)
        return pinned_plan;
    tfm__plan p = { threads() };
    return p;
}

tfm__plan tfm__plan_pin(void)
{
    if (pin_depth++ == 0)
        pinned_plan.slots = threads();
    return pinned_plan;
}

void tfm__plan_unpin(const tfm__plan *pinned)
{
    (void)pinned;
    pin_depth--;
}

static void run_chunk(int c)
{
    int64_t begin = job.n * c / job.chunks;
    int64_t end = job.n * (c + 1) / job.chunks;
    if (begin < end)
        job.fn(job.ctx, begin, end, c);
}

static void *worker(void *arg)
{
    const int index = (int)(intptr_t)arg; /* runs chunk index + 1 */
    uint64_t seen = 0;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        while (generation == seen)
            pthread_cond_wait(&pool_wake, &pool_lock);
        seen = generation;
        int mine = index + 1 < job.chunks;
        /* (workers beyond the chunk count just go back to sleep) */
        pthread_mutex_unlock(&pool_lock);
        if (mine)
            run_chunk(index + 1);
        pthread_mutex_lock(&pool_lock);
        if (mine && --pending == 0)
            pthread_cond_signal(&pool_done);
    }
    return NULL;
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&config_lock);
    pthread_mutex_lock(&pool_owner);    /* waits for a call in flight */
    pthread_mutex_lock(&pool_lock);
    tfm__ws_fork_prepare();
}

static void fork_parent(void)
{
    tfm__ws_fork_parent();
    pthread_mutex_unlock(&pool_lock);
    pthread_mutex_unlock(&pool_owner);
    pthread_mutex_unlock(&config_lock);
}

static void fork_child(void)
{
    /* The only thread here is the one that forked and holds the locks. */
    n_workers = 0;
    pending = 0;
    pthread_cond_init(&pool_wake, NULL);  /* no waiters exist any more */
    pthread_cond_init(&pool_done, NULL);
    tfm__ws_fork_child();   /* frees the workers' workspaces, unlocks */
    pthread_mutex_unlock(&pool_lock);
    pthread_mutex_unlock(&pool_owner);
    pthread_mutex_unlock(&config_lock);
}

static int atfork_registered;           /* under pool_lock */

/* Starts workers up to `want`; returns how many exist. */
static int ensure_workers(int want)
{
    if (n_workers < want && !atfork_registered)
        atfork_registered =
            pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
    while (n_workers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker,
                                (void *)(intptr_t)n_workers);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        n_workers++;
    }
    return n_workers;
}

void tfm__parallel_for(tfm__plan plan, int64_t n, int64_t grain,
                       tfm__range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t chunks = (n + grain - 1) / grain;
    int t = plan.slots < 1 ? 1 : plan.slots;
    if (chunks > t)
        chunks = t;
    if (chunks <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    if (pthread_mutex_trylock(&pool_owner) != 0) {
        /* Busy: the same chunks, one after another, so that the results
         * do not depend on whether the pool was free. */
        for (int64_t c = 0; c < chunks; c++) {
            int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
            if (begin < end)
                fn(ctx, begin, end, 0);
        }
        return;
    }
    pthread_mutex_lock(&pool_lock);
    int workers = ensure_workers((int)chunks - 1);
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.chunks = (int)chunks;
    /* Worker i runs chunk i + 1; chunks without a worker (thread creation
     * failed) run here, after chunk 0. */
    int helped = workers < (int)chunks - 1 ? workers : (int)chunks - 1;
    pending = helped;
    generation++;
    pthread_cond_broadcast(&pool_wake);
    pthread_mutex_unlock(&pool_lock);

    run_chunk(0);
    for (int c = helped + 1; c < (int)chunks; c++)
        run_chunk(c);

    pthread_mutex_lock(&pool_lock);
    while (pending > 0)
        pthread_cond_wait(&pool_done, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
    pthread_mutex_unlock(&pool_owner);
}

void tfm_set_num_threads(int n)
{
    pthread_mutex_lock(&config_lock);
    n_threads = n < 1 ? default_threads()
                      : n > TFM_MAX_THREADS ? TFM_MAX_THREADS : n;
    tfm__blas_single_thread();
    pthread_mutex_unlock(&config_lock);
}

int tfm_get_num_threads(void)
{
    return threads();
}
