/* libFuzzer harness: transformer-generate --classify's inputs from
 * untrusted bytes: an image (PNG or JPEG, decoded by libpng / libjpeg
 * through tools/image_input.h's decode_image) and the checkpoint's
 * preprocessor_config.json (read_prep), then the preprocessing --classify
 * applies (bilinear resize to the model's size, rescale, normalize).
 *
 * Input: one mode byte (the model's image_size is 1 + its low 5 bits;
 * bit 5: a PNG's chunk CRCs kept as they are, else made right), then parts separated by 0xFF 0xFF (fuzz_files.h): the image file,
 * preprocessor_config.json (empty: absent, ViTImageProcessor's defaults).
 * Promises: a refused file fails with a message and no pixels leak; a
 * decoded image has a size of at least 1 x 1, all its pixels, and no
 * more pixels than Pillow decodes (2 x Image.MAX_IMAGE_PIXELS; above that
 * Pillow raises DecompressionBombError, issue 44 kind 5); the resize gives
 * exactly the size asked.  The harness bounds nothing before decoding: an
 * image header that makes the decoder allocate far more than the file
 * holds (a decompression bomb) is a finding, from libFuzzer's
 * -malloc_limit_mb / -rss_limit_mb or from that promise, until the reader
 * refuses it by its header.
 *
 * The CLI's messages go to /dev/null unless TFM_FUZZ_VERBOSE is set
 * (fuzz_cli.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>
#include <zlib.h>

#include "fuzz_files.h"
#include "fuzz_util.h"

#include "fuzz_cli.h"
#include "image_input.h"
#include "fuzz_cli_end.h"

static const char *const NAMES[] = { "image", "preprocessor_config.json" };

/* A PNG's chunk CRCs made right (in a copy), so that the fuzzer's changes
 * to a chunk (IHDR's size, a palette) reach libpng's decoding instead of
 * its CRC check; a PNG with a wrong CRC is in the seeds.  Mode bit 5 set
 * keeps the bytes as they are. */
static uint8_t *png_with_crcs(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    CHECK(copy != NULL);
    memcpy(copy, data, size);
    for (size_t at = 8; at + 12 <= size;) {
        const uint32_t n = (uint32_t)copy[at] << 24 | (uint32_t)copy[at + 1] << 16 |
                           (uint32_t)copy[at + 2] << 8 | copy[at + 3];
        if (n > size - at - 12)
            break;
        const uint32_t crc = (uint32_t)crc32(0, copy + at + 4, n + 4);
        for (int k = 0; k < 4; k++)
            copy[at + 8 + n + k] = (uint8_t)(crc >> (24 - 8 * k));
        at += 12 + (size_t)n;
    }
    return copy;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int64_t image_size = 1 + (data[0] & 31);
    size_t pos = 1, n_image = 0, n_prep = 0;
    const uint8_t *image = files_part(data, size, &pos, &n_image);
    const uint8_t *prep_json = files_part(data, size, &pos, &n_prep);
    if (!(data[0] & 32) && n_image >= 8 && memcmp(image, "\x89PNG", 4) == 0) {
        uint8_t *fixed = png_with_crcs(image, n_image);
        files_put(NAMES[0], fixed, n_image);
        free(fixed);
    } else {
        files_put(NAMES[0], image, n_image);
    }
    files_put(NAMES[1], prep_json, n_prep);
    char path[512];
    files_path(path, sizeof path, "image");

    image_prep prep;
    const int prep_rc = read_prep(files_dir(), image_size, &prep);
    if (!prep_rc) {
        /* --classify's own check: size, when given, is the model's */
        CHECK(prep.height == image_size && prep.width == image_size);
        for (int c = 0; c < 3; c++)
            CHECK(prep.std[c] != 0.0 && isfinite(prep.std[c]));
    }
    rgb_image img = { 0, 0, NULL };
    if (decode_image(path, &img)) {
        CHECK(img.px == NULL);
        return 0;
    }
    CHECK(img.px != NULL && img.width >= 1 && img.height >= 1);
    /* PIL.Image.MAX_IMAGE_PIXELS = int(1024 * 1024 * 1024 // 4 // 3) */
    CHECK(img.width * img.height <= 2 * (int64_t)89478485);
    /* every pixel readable (ASan checks the buffer's extent) */
    uint64_t sum = 0;
    for (int64_t i = 0; i < img.width * img.height * 3; i++)
        sum += img.px[i];
    CHECK(sum <= 255u * (uint64_t)(img.width * img.height * 3));
    if (!prep_rc) {
        if (prep.do_resize) {
            CHECK(resize_bilinear(&img, prep.width, prep.height) == 0);
            CHECK(img.width == prep.width && img.height == prep.height);
        }
        if (img.width == image_size && img.height == image_size) {
            /* channels first, rescaled and normalized as --classify */
            const int64_t S = image_size;
            float *x = malloc(sizeof *x * (size_t)(3 * S * S));
            CHECK(x != NULL);
            image_pixel_values(&img, &prep, x);
            free(x);
        }
    }
    free(img.px);
    return 0;
}
