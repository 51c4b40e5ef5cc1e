/* libFuzzer harness: a checkpoint's generation defaults from untrusted
 * bytes: generation_config.json, else config.json, as transformer-generate
 * --translate reads them (tools/generation_config.h,
 * read_generation_defaults).
 *
 * Input: parts separated by 0xFF 0xFF (fuzz_files.h):
 * generation_config.json, config.json (an empty part: absent).  Promises:
 * a refused directory gives a message (to /dev/null unless
 * TFM_FUZZ_VERBOSE is set, fuzz_cli.h); a read one holds only values the
 * beam search can take: ids -1 (absent) or 0 .. 2^31 - 1, num_beams >= 0,
 * lengths -1 or >= 0, and its suppressed ids, all in range, no more than
 * the files list. */
#include <stdint.h>
#include <stdlib.h>

#include <transformer/transformer.h>

#include "fuzz_files.h"
#include "fuzz_util.h"

#include "fuzz_cli.h"
#include "generation_config.h"
#include "fuzz_cli_end.h"

static const char *const NAMES[] = { "generation_config.json", "config.json" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    files_put_parts(data, size, &pos, NAMES,
                    (int)(sizeof NAMES / sizeof NAMES[0]));
    generation_defaults g;
    if (read_generation_defaults(files_dir(), &g))
        return 0;
    CHECK(g.num_beams >= 0);
    CHECK(g.max_length >= 0);
    CHECK(g.max_new_tokens >= -1 && g.min_length >= -1 &&
          g.min_new_tokens >= -1);
    CHECK(g.decoder_start >= -1 && g.eos >= -1 && g.forced_eos >= -1);
    CHECK(g.n_eos >= 0);
    CHECK(g.early_stopping == TFM_EARLY_STOPPING_FALSE ||
          g.early_stopping == TFM_EARLY_STOPPING_TRUE ||
          g.early_stopping == TFM_EARLY_STOPPING_NEVER);
    CHECK(g.suppress != NULL && g.n_suppress >= 0 && (size_t)g.n_suppress <= size);
    for (int64_t i = 0; i < g.n_suppress; i++)
        CHECK(g.suppress[i] >= 0);
    free(g.suppress);
    return 0;
}
