/* A small persistent thread pool (parallel.h).
 *
 * Workers sleep on a condition variable; a call publishes (fn, ctx, chunks)
 * under the pool mutex with a new generation number and then it and the
 * workers take chunks from a shared counter until none is left (dynamic
 * distribution: a thread that the system deschedules, with another
 * process on its core, takes fewer chunks instead of stalling the call),
 * and the call returns once every chunk is done -- it waits for chunks in
 * progress, never for a worker that has not woken up.  The work is split
 * into up to TFM_OVERSPLIT chunks per thread where the items are
 * independent (tfm__parallel_for), one per thread where they are the rows
 * of a product (tfm__parallel_for_products: OpenBLAS may round a row
 * differently in a product of fewer rows, so the split stays 1.0's), the
 * bounds fixed by (n, grain, plan.slots) alone, so which thread runs a
 * chunk changes no bits (the range functions use `slot` for scratch
 * only).  The counter
 * carries the generation in its high half, so a worker that wakes late
 * for a job already finished cannot take a chunk of the next one.  One
 * call at a time owns the pool (pool_owner is taken with trylock); any
 * other call, from another thread or nested inside a task, runs the same
 * chunks serially in its caller, so results never depend on whether the
 * pool was free.
 *
 * Hand-offs: a worker that finishes its chunks watches the generation for
 * a while (TFM_SPIN_NS) before it sleeps on the condition variable, and
 * a call waits for its last chunks the same way before it sleeps: a
 * decoding step or a layer's products hand the pool a job every few
 * microseconds, and sleeping and waking through the kernel (two system
 * calls a hand-off, dearer still in a virtual machine) cost more than the
 * short products themselves.  The call wakes the condition variable only
 * when a worker sleeps on it (`sleepers`).
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
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TFM_CPU_RELAX() _mm_pause()
#else
#define TFM_CPU_RELAX() ((void)0)
#endif

#include "base/gemm.h"
#include "base/parallel.h"
#include "base/workspace.h"
#include "transformer/module.h"

#define TFM_MAX_THREADS 64
/* Chunks per thread (at most; fewer when grain says so). */
#define TFM_OVERSPLIT 4
/* How long a worker watches for the next job, and a call for its last
 * chunks, before sleeping: a few short products. */
#define TFM_SPIN_NS 20000

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static int n_threads;                   /* 0 until first use */

static pthread_mutex_t pool_owner = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;
static int n_workers;                   /* started so far */
/* Written under pool_lock; read there, or atomically by a spinning worker
 * (which then takes pool_lock to read the job). */
static _Atomic uint64_t generation;
static int sleepers;                    /* workers in pool_wake's wait */

static struct {
    tfm__range_fn fn;
    void *ctx;
    int64_t n;
    int chunks;
    int threads;        /* the caller (slot 0) and workers 0 .. threads-2 */
} job;
/* (generation << 32) | the next chunk to take, of the current job */
static _Atomic uint64_t ticket;
static atomic_int done;                 /* chunks of the job finished */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spins until ready(arg) (returns 1) or TFM_SPIN_NS have passed (returns
 * 0). */
static int spin_until(int (*ready)(const void *), const void *arg)
{
    const uint64_t t0 = now_ns();
    for (unsigned i = 1;; i++) {
        if (ready(arg))
            return 1;
        TFM_CPU_RELAX();
        if (i % 64 == 0 && now_ns() - t0 > TFM_SPIN_NS)
            return 0;
    }
}

/* A new job: the generation differs from *arg (the worker's last). */
static int new_generation(const void *arg)
{
    return atomic_load_explicit(&generation, memory_order_acquire) !=
           *(const uint64_t *)arg;
}

/* The call's chunks are done: `done` has reached *arg. */
static int chunks_done(const void *arg)
{
    return atomic_load_explicit(&done, memory_order_acquire) >=
           *(const int *)arg;
}

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

/* The first item of chunk c of `chunks` over n items. */
static int64_t bound(int64_t n, int64_t c, int64_t chunks)
{
    return n * c / chunks;
}

/* Takes and runs chunks of job `gen` (read under pool_lock by the
 * caller, fn/ctx/n/chunks given) until none is left or the job is no
 * longer `gen`; each finished chunk counts in `done`, the last one wakes
 * the call. */
static void take_chunks(uint64_t gen, tfm__range_fn fn, void *ctx,
                        int64_t n, int chunks, int slot)
{
    for (;;) {
        uint64_t t = atomic_load_explicit(&ticket, memory_order_acquire);
        int c;
        do {
            if (t >> 32 != (gen & 0xffffffffu) ||
                (int)(t & 0xffffffffu) >= chunks)
                return;
            c = (int)(t & 0xffffffffu);
        } while (!atomic_compare_exchange_weak_explicit(
            &ticket, &t, t + 1, memory_order_acq_rel, memory_order_acquire));
        const int64_t begin = bound(n, c, chunks);
        const int64_t end = bound(n, c + 1, chunks);
        if (begin < end)
            fn(ctx, begin, end, slot);
        if (atomic_fetch_add_explicit(&done, 1, memory_order_acq_rel) + 1 ==
            chunks) {
            pthread_mutex_lock(&pool_lock);
            pthread_cond_signal(&pool_done);
            pthread_mutex_unlock(&pool_lock);
        }
    }
}

static void *worker(void *arg)
{
    const int index = (int)(intptr_t)arg; /* slot index + 1 */
    uint64_t seen = 0;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        if (atomic_load_explicit(&generation, memory_order_relaxed) == seen) {
            /* Watch for the next job a while, then sleep. */
            pthread_mutex_unlock(&pool_lock);
            spin_until(new_generation, &seen);
            pthread_mutex_lock(&pool_lock);
            while (atomic_load_explicit(&generation, memory_order_relaxed) ==
                   seen) {
                sleepers++;
                pthread_cond_wait(&pool_wake, &pool_lock);
                sleepers--;
            }
        }
        seen = atomic_load_explicit(&generation, memory_order_relaxed);
        /* (workers beyond the call's thread count go back to sleep) */
        const int mine = index + 1 < job.threads;
        const tfm__range_fn fn = job.fn;
        void *const ctx = job.ctx;
        const int64_t n = job.n;
        const int chunks = job.chunks;
        pthread_mutex_unlock(&pool_lock);
        if (mine)
            take_chunks(seen, fn, ctx, n, chunks, index + 1);
        pthread_mutex_lock(&pool_lock);
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
    sleepers = 0;
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

static void parallel_run(tfm__plan plan, int64_t n, int64_t grain,
                         int per_thread, tfm__range_fn fn, void *ctx);

void tfm__parallel_for(tfm__plan plan, int64_t n, int64_t grain,
                       tfm__range_fn fn, void *ctx)
{
    parallel_run(plan, n, grain, TFM_OVERSPLIT, fn, ctx);
}

void tfm__parallel_for_products(tfm__plan plan, int64_t n, int64_t grain,
                                tfm__range_fn fn, void *ctx)
{
    parallel_run(plan, n, grain, 1, fn, ctx);
}

static void parallel_run(tfm__plan plan, int64_t n, int64_t grain,
                         int per_thread, tfm__range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t chunks = (n + grain - 1) / grain;
    int t = plan.slots < 1 ? 1 : plan.slots;
    const int64_t most = t > 1 ? (int64_t)t * per_thread : 1;
    if (chunks > most)
        chunks = most;
    if (chunks <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    if (pthread_mutex_trylock(&pool_owner) != 0) {
        /* Busy: the same chunks, one after another, so that the results
         * do not depend on whether the pool was free. */
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t begin = bound(n, c, chunks);
            const int64_t end = bound(n, c + 1, chunks);
            if (begin < end)
                fn(ctx, begin, end, 0);
        }
        return;
    }
    pthread_mutex_lock(&pool_lock);
    const int want = (int)(chunks < t ? chunks : t) - 1;
    const int workers = ensure_workers(want);
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.chunks = (int)chunks;
    /* Whatever the workers do not take (or could not be started for),
     * the caller runs. */
    job.threads = 1 + (workers < want ? workers : want);
    const uint64_t gen =
        atomic_load_explicit(&generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&done, 0, memory_order_relaxed);
    atomic_store_explicit(&ticket, (gen & 0xffffffffu) << 32,
                          memory_order_release);
    atomic_store_explicit(&generation, gen, memory_order_release);
    if (job.threads > 1 && sleepers > 0)
        pthread_cond_broadcast(&pool_wake);
    pthread_mutex_unlock(&pool_lock);

    take_chunks(gen, fn, ctx, n, (int)chunks, 0);

    const int all = (int)chunks;
    spin_until(chunks_done, &all);
    pthread_mutex_lock(&pool_lock);
    while (atomic_load_explicit(&done, memory_order_acquire) < (int)chunks)
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
