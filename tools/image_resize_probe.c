/* Test helper (not installed): decodes an image file with
 * transformer-generate's image code (image_input.h: libpng / libjpeg) and
 * writes its 8-bit RGB pixels, resized to WIDTH x HEIGHT as --classify
 * resizes them, to stdout, so that tools/check_image_resize.py can compare
 * them with Pillow's.
 *
 *   image_resize_probe IMAGE WIDTH HEIGHT > pixels */
#define PROGRAM "image_resize_probe"
#include "cli_args.h"
#include "json_file.h"
#include "image_input.h"

int main(int argc, char **argv)
{
    int64_t width = 0, height = 0;
    if (argc != 4)
        return fail("usage: " PROGRAM " IMAGE WIDTH HEIGHT");
    if (parse_int64("WIDTH", argv[2], 1, &width) ||
        parse_int64("HEIGHT", argv[3], 1, &height))
        return 1;
    rgb_image img = { 0, 0, NULL };
    if (decode_image(argv[1], &img) || resize_bilinear(&img, width, height)) {
        free(img.px);
        return 1;
    }
    fwrite(img.px, 1, (size_t)(img.width * img.height * 3), stdout);
    free(img.px);
    return 0;
}
