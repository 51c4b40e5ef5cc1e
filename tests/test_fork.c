/* fork after forward passes (issue 13, fault 8).
 *
 * The library's persistent pool (src/parallel.c) had no fork handling: a
 * child forked after any forward pass inherited a pool whose worker
 * threads do not exist in it, and its first parallel call waited for them
 * forever (Python's multiprocessing with the fork start method hung).  Here
 * the parent runs a forward pass that the pool splits over 4 threads, then
 * forks: each child runs the same pass and must produce the parent's
 * output bit for bit (same thread count, same split), and exit.  A child
 * that hangs is killed by alarm() and counts as a failure.  Cases: a plain
 * fork; a child that forks again (a grandchild); a fork while another
 * thread of the parent is running forward passes in a loop (the fork waits
 * for the call in flight); and the parent's pool still working after. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <transformer/transformer.h>

#include "test_util.h"

#define D 96
#define HEADS 4
#define L 48

static tfm_module *mha;
static tfm_tensor *x, *ref;

static tfm_status forward(tfm_tensor *out)
{
    tfm_attention_masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
    return tfm_mha_forward(mha, x, x, x, &causal, out, NULL);
}

/* In a child: the pass again, compared with the parent's; the exit code
 * says how it went (0 same, 2 error, 3 different). */
static int child_check(void)
{
    alarm(60);   /* a hang becomes SIGALRM */
    tfm_tensor *out = clone(x);
    if (!out || forward(out) != TFM_OK)
        return 2;
    int same = memcmp(tfm_tensor_data_const(out), tfm_tensor_data_const(ref),
                      (size_t)tfm_tensor_numel(ref) * sizeof(float)) == 0;
    tfm_tensor_free(out);
    return same ? 0 : 3;
}

/* Forks; the child runs body() and _exits with its result.  Returns the
 * child's exit code, or 100 + the signal that ended it. */
static int in_child(int (*body)(void))
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        _exit(body());
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status)
                             : 100 + (WIFSIGNALED(status) ? WTERMSIG(status)
                                                          : 0);
}

static int grandchild(void)
{
    int rc = child_check();
    if (rc != 0)
        return rc;
    return in_child(child_check);
}

static int setup(void **state)
{
    (void)state;
    tfm_set_num_threads(4);
    if (tfm_mha_create(D, HEADS, 0, 0, 1, &mha) != TFM_OK)
        return -1;
    lcg_randomize(mha, 11);
    x = lcg_fill(make3(2, L, D, NULL));
    ref = clone(x);
    return ref && forward(ref) == TFM_OK ? 0 : -1;  /* the pool starts */
}

static int teardown(void **state)
{
    (void)state;
    tfm_module_free(mha);
    FREE_TENSORS(x, ref);
    tfm_set_num_threads(0);
    return 0;
}

static void test_child_after_forward(void **state)
{
    (void)state;
    assert_int_equal(in_child(child_check), 0);
    assert_int_equal(in_child(child_check), 0);   /* twice */
}

static void test_grandchild(void **state)
{
    (void)state;
    assert_int_equal(in_child(grandchild), 0);
}

static int stop;
/* The computing thread's output, in a global: a child forked while the
 * thread runs still reaches it (valgrind would call a tensor that only a
 * vanished thread's stack held "definitely lost"). */
static tfm_tensor *volatile loop_out;

static void *loop(void *arg)
{
    long *passes = arg;
    tfm_tensor *out = loop_out = clone(x);
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        if (forward(out) != TFM_OK ||
            memcmp(tfm_tensor_data_const(out), tfm_tensor_data_const(ref),
                   (size_t)tfm_tensor_numel(ref) * sizeof(float)) != 0) {
            *passes = -1;
            break;
        }
        ++*passes;
    }
    loop_out = NULL;
    tfm_tensor_free(out);
    return NULL;
}

static void test_fork_while_another_thread_computes(void **state)
{
    (void)state;
    long passes = 0;
    pthread_t t;
    __atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
    assert_int_equal(pthread_create(&t, NULL, loop, &passes), 0);
    int rc[5];
    for (int i = 0; i < 5; i++)
        rc[i] = in_child(child_check);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);   /* before any assertion can leave */
    for (int i = 0; i < 5; i++)
        assert_int_equal(rc[i], 0);
    assert_true(passes >= 0);
}

static void test_parent_pool_still_works(void **state)
{
    (void)state;
    assert_int_equal(in_child(child_check), 0);
    assert_int_equal(child_check(), 0);   /* here, in the parent */
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_after_forward),
        cmocka_unit_test(test_grandchild),
        cmocka_unit_test(test_fork_while_another_thread_computes),
        cmocka_unit_test(test_parent_pool_still_works),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
