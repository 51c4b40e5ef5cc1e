/* A main() for the fuzz harnesses without libFuzzer: feeds every file
 * named on the command line (directories: every regular file in them, in
 * name order) to LLVMFuzzerTestOneInput, each in a buffer of exactly its
 * size, so that the regular test suite replays the regression inputs and
 * the seed corpus.  A broken promise aborts; a clean run prints how many
 * inputs were replayed. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static int replay_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        perror(path);
        return 0;
    }
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    /* malloc(0) may return NULL; keep a real (one byte) buffer but pass
     * the true size, so an overread is still caught under ASan. */
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, fp) != (size_t)n)) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        fclose(fp);
        return 0;
    }
    fclose(fp);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 1;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays the regular files of dir in name order; returns their number or
 * -1 on error. */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof *names);
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof *names, compare_names);
    int done = 0, ok = 1;
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
            ok &= replay_file(names[i]);
            done++;
        }
        free(names[i]);
    }
    free(names);
    return ok ? done : -1;
}

int main(int argc, char **argv)
{
    int total = 0;
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            return 1;
        }
        int n = S_ISDIR(sb.st_mode) ? replay_dir(argv[i])
                                    : replay_file(argv[i]);
        if (n < 0 || (!S_ISDIR(sb.st_mode) && n == 0))
            return 1;
        total += n;
    }
    printf("%d inputs replayed, no failure\n", total);
    return 0;
}
