/* transformer-generate --classify: image files decoded by libpng and
 * libjpeg (never by a decoder of our own), preprocessed as the
 * checkpoint's preprocessor_config.json says (transformers'
 * ViTImageProcessor: resize to the model's size with bilinear resampling,
 * rescale by rescale_factor, normalize by image_mean / image_std), then
 * classified by tfm_model_image_logits.  Static helpers for the programs
 * that include it, after cli_args.h and json_file.h. */
#ifndef TFM_TOOLS_IMAGE_INPUT_H
#define TFM_TOOLS_IMAGE_INPUT_H

#include <cJSON.h>
#include <jpeglib.h>
#include <jerror.h>
#include <libexif/exif-data.h>
#include <png.h>
#include <setjmp.h>

#include <transformer/transformer.h>

/* An 8-bit RGB image, rows top to bottom, pixels interleaved. */
typedef struct rgb_image {
    int64_t width, height;
    unsigned char *px;       /* [height, width, 3], malloc'd */
} rgb_image;

/* Decompression bombs, refused before decoding as Pillow refuses them
 * (PIL.Image.MAX_IMAGE_PIXELS, int(1024 * 1024 * 1024 // 4 // 3), and
 * _decompression_bomb_check): a header whose width x height exceeds
 * twice the limit is refused with Pillow's DecompressionBombError
 * message; above the limit, Pillow's DecompressionBombWarning is printed
 * and the image decoded. */
#define IMAGE_MAX_PIXELS ((int64_t)(1024 * 1024 * 1024 / 4 / 3))

/* 0, or 1 with Pillow's message printed when width x height (from the
 * file's header) is a decompression bomb. */
static int image_size_check(const char *path, uint64_t width,
                            uint64_t height)
{
    const uint64_t pixels = width * height; /* each below 2^32 */
    if (pixels > 2 * (uint64_t)IMAGE_MAX_PIXELS)
        return fail("%s: Image size (%llu pixels) exceeds limit of %llu "
                    "pixels, could be decompression bomb DOS attack.", path,
                    (unsigned long long)pixels,
                    (unsigned long long)(2 * IMAGE_MAX_PIXELS));
    if (pixels > (uint64_t)IMAGE_MAX_PIXELS)
        fprintf(stderr, "%s: warning: %s: Image size (%llu pixels) exceeds "
                "limit of %llu pixels, could be decompression bomb DOS "
                "attack.\n", PROGRAM, path, (unsigned long long)pixels,
                (unsigned long long)IMAGE_MAX_PIXELS);
    return 0;
}

/* libpng's error and warning handlers: errors return to png_jmpbuf with
 * the message kept, warnings are dropped (a library user's stderr is not
 * ours to write on). */
static void png_failed(png_structp png, png_const_charp message)
{
    char *keep = png_get_error_ptr(png);
    snprintf(keep, 200, "%s", message);
    png_longjmp(png, 1);
}

static void png_warned(png_structp png, png_const_charp message)
{
    (void)png;
    (void)message;
}

/* PNG through libpng, converted to 8-bit RGB as Pillow's
 * Image.open(path).convert("RGB") gives it (what transformers'
 * load_image hands the image processor): alpha and tRNS transparency
 * dropped, not composited; no gamma (gAMA) conversion; 16-bit colour and
 * grey-with-alpha samples keep their high byte, 16-bit grey is clipped to
 * 255 (Pillow's "I" to "RGB"); grey of 1, 2 and 4 bits scaled to 8;
 * palettes looked up; interlaced images deinterlaced. */
static int decode_png(const char *path, rgb_image *img)
{
    FILE *file = open_regular(path, 0);
    if (!file)
        return 1;
    char message[200] = "";
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, message,
                                             png_failed, png_warned);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    unsigned char *volatile px = NULL;
    unsigned char *volatile row16 = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        fclose(file);
        return fail("%s: out of memory", path);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(file);
        free(rows);
        free(px);
        free(row16);
        return fail("%s: cannot decode the PNG (%s)", path, message);
    }
    png_init_io(png, file);
    png_read_info(png, info);
    const png_uint_32 w = png_get_image_width(png, info);
    const png_uint_32 h = png_get_image_height(png, info);
    if (image_size_check(path, w, h)) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(file);
        return 1;
    }
    const int type = png_get_color_type(png, info);
    const int depth = png_get_bit_depth(png, info);
    const int grey16 = type == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (type == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16 && !grey16)
        png_set_strip_16(png);
    if (type & PNG_COLOR_MASK_ALPHA)
        png_set_strip_alpha(png);
    if ((type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) &&
        !grey16)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    /* channels after the conversions: 3, 4 where a palette's tRNS became
     * alpha (png_set_palette_to_rgb expands it), or grey16's 1 */
    const int channels = png_get_channels(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info);
    if ((uint64_t)w * h > (uint64_t)1 << 31 ||
        rowbytes != (size_t)w * channels * (grey16 ? 2 : 1) ||
        (grey16 ? channels != 1 : channels != 3 && channels != 4))
        png_error(png, "unexpected layout after conversion");
    px = malloc((size_t)w * h * 3);
    row16 = malloc(rowbytes * h);      /* the decoded samples */
    rows = malloc((size_t)h * sizeof *rows);
    if (!px || !row16 || !rows)
        png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = row16 + y * rowbytes;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    free(rows);
    rows = NULL;
    for (size_t k = 0; k < (size_t)w * h; k++) {
        if (grey16) {
            const unsigned v = (unsigned)row16[2 * k] << 8 | row16[2 * k + 1];
            px[3 * k] = px[3 * k + 1] = px[3 * k + 2] =
                (unsigned char)(v > 255 ? 255 : v);
        } else {   /* RGB, or RGBA whose alpha Pillow's convert drops */
            memcpy(px + 3 * k, row16 + (size_t)channels * k, 3);
        }
    }
    png_destroy_read_struct(&png, &info, NULL);
    fclose(file);
    free(row16);
    img->width = w;
    img->height = h;
    img->px = px;
    return 0;
}

/* The EXIF orientation (1..8; 1: as stored) of a JPEG's APP1 "Exif"
 * marker saved by libjpeg, read by libexif; 1 when there is none. */
static int exif_orientation(j_decompress_ptr cinfo)
{
    int orientation = 1;
    for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next) {
        if (m->marker != JPEG_APP0 + 1 || m->data_length < 6 ||
            memcmp(m->data, "Exif\0\0", 6) != 0)
            continue;
        ExifData *ed = exif_data_new_from_data(m->data, m->data_length);
        ExifEntry *e = ed ? exif_data_get_entry(ed, EXIF_TAG_ORIENTATION)
                          : NULL;
        if (e && e->format == EXIF_FORMAT_SHORT && e->components == 1) {
            const int v = exif_get_short(e->data, exif_data_get_byte_order(ed));
            if (v >= 1 && v <= 8)
                orientation = v;
        }
        if (ed)
            exif_data_unref(ed);
        break;
    }
    return orientation;
}

/* img turned upright by its EXIF orientation o, as Pillow's
 * ImageOps.exif_transpose (transformers' load_image) does: 2 mirror, 3
 * rotate 180, 4 flip, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8
 * rotate 90 counter-clockwise.  1 on allocation failure (message said). */
static int apply_orientation(rgb_image *img, int o)
{
    if (o <= 1)
        return 0;
    const int64_t W = img->width, H = img->height;
    const int swap = o >= 5;
    const int64_t w2 = swap ? H : W, h2 = swap ? W : H;
    unsigned char *out = malloc((size_t)(W * H * 3));
    if (!out)
        return fail("out of memory");
    for (int64_t y2 = 0; y2 < h2; y2++)
        for (int64_t x2 = 0; x2 < w2; x2++) {
            int64_t x = x2, y = y2;   /* the source pixel */
            switch (o) {
            case 2: x = W - 1 - x2; break;
            case 3: x = W - 1 - x2; y = H - 1 - y2; break;
            case 4: y = H - 1 - y2; break;
            case 5: x = y2; y = x2; break;
            case 6: x = y2; y = H - 1 - x2; break;
            case 7: x = W - 1 - y2; y = H - 1 - x2; break;
            case 8: x = W - 1 - y2; y = x2; break;
            }
            memcpy(out + (y2 * w2 + x2) * 3, img->px + (y * W + x) * 3, 3);
        }
    free(img->px);
    img->px = out;
    img->width = w2;
    img->height = h2;
    return 0;
}

/* libjpeg's error manager that returns to the caller (libjpeg's own
 * exits the process). */
typedef struct jpeg_failure {
    struct jpeg_error_mgr mgr;
    jmp_buf back;
    char message[JMSG_LENGTH_MAX];
} jpeg_failure;

static void jpeg_failed(j_common_ptr cinfo)
{
    jpeg_failure *f = (jpeg_failure *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, f->message);
    longjmp(f->back, 1);
}

/* libjpeg's warnings: a file that ends before its image does is refused
 * as Pillow refuses it ("image file is truncated"; libjpeg would fill the
 * rest with grey); the others are dropped, as Pillow drops them (and a
 * library user's stderr is not ours to write on). */
static void jpeg_warned(j_common_ptr cinfo, int level)
{
    if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF)
        jpeg_failed(cinfo);
}

/* JPEG through libjpeg, decoded to 8-bit RGB (grayscale and CMYK files
 * are converted by libjpeg where it can). */
static int decode_jpeg(const char *path, rgb_image *img)
{
    FILE *file = open_regular(path, 0);
    if (!file)
        return 1;
    struct jpeg_decompress_struct cinfo;
    jpeg_failure err;
    unsigned char *volatile px = NULL;
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_failed;
    err.mgr.emit_message = jpeg_warned;
    if (setjmp(err.back)) {
        jpeg_destroy_decompress(&cinfo);
        fclose(file);
        free(px);
        return fail("%s: cannot decode the JPEG (%s)", path, err.message);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_stdio_src(&cinfo, file);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    if (image_size_check(path, cinfo.image_width, cinfo.image_height)) {
        jpeg_destroy_decompress(&cinfo);
        fclose(file);
        return 1;
    }
    const int orientation = exif_orientation(&cinfo);
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const size_t row = (size_t)cinfo.output_width * 3;
    px = malloc(row * cinfo.output_height);
    if (!px) {
        jpeg_destroy_decompress(&cinfo);
        fclose(file);
        return fail("%s: out of memory", path);
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW r = px + row * cinfo.output_scanline;
        jpeg_read_scanlines(&cinfo, &r, 1);
    }
    img->width = cinfo.output_width;
    img->height = cinfo.output_height;
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    fclose(file);
    img->px = px;
    return apply_orientation(img, orientation);
}

/* By the file's signature: PNG (\x89PNG) or JPEG (FF D8 FF). */
static int decode_image(const char *path, rgb_image *img)
{
    unsigned char sig[8] = { 0 };
    FILE *f = open_regular(path, 0);
    if (!f)
        return 1;
    size_t got = fread(sig, 1, sizeof sig, f);
    fclose(f);
    if (got >= 8 && png_sig_cmp(sig, 0, 8) == 0)
        return decode_png(path, img);
    if (got >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF)
        return decode_jpeg(path, img);
    return fail("%s: not a PNG or JPEG file", path);
}

/* One axis of a separable bilinear (triangle-filter) resize from n to m
 * samples, as Pillow's resample=BILINEAR (which transformers'
 * ViTImageProcessor uses) computes it on 8-bit images: output i covers
 * input [(i + 0.5) s - f, (i + 0.5) s + f] with s = n / m and support
 * f = max(s, 1) (antialiased when shrinking), weights 1 - |t| of the
 * distance t in units of max(s, 1), normalised to sum 1, then held as
 * fixed-point numbers of 22 fraction bits (rounded half away from zero)
 * and the sum rounded half up and clipped to 0..255, so that the results
 * are Pillow's bit for bit.  src has `count` lines of n samples `step`
 * apart (3 channels each), dst the same lines of m samples. */
#define RESIZE_BITS 22
static int resize_axis(const unsigned char *src, int64_t n,
                       int64_t src_step, int64_t src_line, unsigned char *dst,
                       int64_t m, int64_t dst_step, int64_t dst_line,
                       int64_t count)
{
    const double scale = (double)n / (double)m;
    const double fs = scale > 1.0 ? scale : 1.0;
    const size_t cap = (size_t)(2 * (int64_t)ceil(fs) + 3);
    double *w = malloc(sizeof *w * cap);
    int64_t *k = malloc(sizeof *k * cap);
    if (!w || !k) {
        free(w);
        free(k);
        return fail("out of memory");
    }
    for (int64_t i = 0; i < m; i++) {
        const double center = (i + 0.5) * scale;
        int64_t lo = (int64_t)(center - fs + 0.5);
        int64_t hi = (int64_t)(center + fs + 0.5);
        if (lo < 0)
            lo = 0;
        if (hi > n)
            hi = n;
        double total = 0.0;
        for (int64_t j = lo; j < hi; j++) {
            double t = fabs((j - center + 0.5) / fs);
            w[j - lo] = t < 1.0 ? 1.0 - t : 0.0;
            total += w[j - lo];
        }
        for (int64_t j = lo; j < hi; j++) {
            const double v = total != 0.0 ? w[j - lo] / total : 0.0;
            k[j - lo] = (int64_t)(v * (double)(1 << RESIZE_BITS) +
                                  (v < 0.0 ? -0.5 : 0.5));
        }
        for (int64_t c = 0; c < count; c++)
            for (int ch = 0; ch < 3; ch++) {
                int64_t acc = (int64_t)1 << (RESIZE_BITS - 1);
                for (int64_t j = lo; j < hi; j++)
                    acc += k[j - lo] * src[c * src_line + j * src_step + ch];
                acc >>= RESIZE_BITS;
                dst[c * dst_line + i * dst_step + ch] =
                    (unsigned char)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
            }
    }
    free(w);
    free(k);
    return 0;
}

/* img resized to width x height (horizontal pass, then vertical). */
static int resize_bilinear(rgb_image *img, int64_t width, int64_t height)
{
    if (img->width == width && img->height == height)
        return 0;
    unsigned char *mid = malloc((size_t)(img->height * width * 3));
    unsigned char *out = malloc((size_t)(height * width * 3));
    int rc = 1;
    if (!mid || !out)
        fail("out of memory");
    else if (!resize_axis(img->px, img->width, 3, img->width * 3, mid, width,
                          3, width * 3, img->height) &&
             !resize_axis(mid, img->height, width * 3, 3, out, height,
                          width * 3, 3, width))
        rc = 0;
    free(mid);
    if (rc) {
        free(out);
        return rc;
    }
    free(img->px);
    img->px = out;
    img->width = width;
    img->height = height;
    return 0;
}

/* preprocessor_config.json's settings, ViTImageProcessor's defaults. */
typedef struct image_prep {
    int do_resize, do_rescale, do_normalize;
    int64_t height, width;
    double rescale_factor;
    double mean[3], std[3];
} image_prep;

/* A JSON number array of 3 (or 1, repeated) into v. */
static int prep_triple(const cJSON *root, const char *key, double v[3])
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!a || cJSON_IsNull(a))
        return 0;
    if (cJSON_IsNumber(a)) {
        v[0] = v[1] = v[2] = a->valuedouble;
        return 0;
    }
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n != 3 && n != 1)
        return fail("preprocessor_config.json \"%s\" must be 3 numbers",
                    key);
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, n == 1 ? 0 : i);
        if (!cJSON_IsNumber(x))
            return fail("preprocessor_config.json \"%s\" must be numbers",
                        key);
        v[i] = x->valuedouble;
    }
    return 0;
}

static int prep_bool(const cJSON *root, const char *key, int *v)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!b || cJSON_IsNull(b))
        return 0;
    if (!cJSON_IsBool(b))
        return fail("preprocessor_config.json \"%s\" must be true or false",
                    key);
    *v = cJSON_IsTrue(b);
    return 0;
}

/* Reads dir/preprocessor_config.json when there is one (absent: the
 * defaults: resize to the model's image_size, rescale 1/255, mean and std
 * 0.5). */
static int read_prep(const char *dir, int64_t image_size, image_prep *p)
{
    *p = (image_prep){ 1, 1, 1, image_size, image_size, 1.0 / 255.0,
                       { 0.5, 0.5, 0.5 }, { 0.5, 0.5, 0.5 } };
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    if (access(path, F_OK) != 0)
        return 0; /* no preprocessor_config.json: the defaults (anything
                   * there, even not a file, is read and refused) */
    cJSON *root = NULL;
    int rc = read_json_object(path, &root);
    if (!rc) {
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(root, "size");
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root,
                                                           "rescale_factor");
        /* size (an int, or {"height", "width"}; "shortest_edge" is not
         * ViT's) must be the model's: transformers' ViT refuses other
         * sizes (without interpolate_pos_encoding), and checked here it
         * never sizes a buffer */
        const cJSON *hw[2] = { size, size };
        if (cJSON_IsObject(size)) {
            hw[0] = cJSON_GetObjectItemCaseSensitive(size, "height");
            hw[1] = cJSON_GetObjectItemCaseSensitive(size, "width");
        }
        for (int k = 0; k < 2 && size && !cJSON_IsNull(size); k++)
            if (!cJSON_IsNumber(hw[k]) || hw[k]->valuedouble != image_size)
                rc = fail("%s: \"size\" must be the model's image_size %lld "
                          "(as {\"height\": %lld, \"width\": %lld} or a "
                          "number): the model takes images of that size",
                          path, (long long)image_size, (long long)image_size,
                          (long long)image_size);
        /* resample: PIL's BILINEAR (2), ViTImageProcessor's default, is
         * the filter implemented here */
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "resample");
        if (!rc && rs && !cJSON_IsNull(rs) &&
            !(cJSON_IsNumber(rs) && rs->valuedouble == 2))
            rc = fail("%s: \"resample\" is not 2 (PIL's BILINEAR), the only "
                      "filter --classify resizes with", path);
        if (cJSON_IsNumber(rf))
            p->rescale_factor = rf->valuedouble;
        rc = rc || prep_bool(root, "do_resize", &p->do_resize) ||
             prep_bool(root, "do_rescale", &p->do_rescale) ||
             prep_bool(root, "do_normalize", &p->do_normalize) ||
             prep_triple(root, "image_mean", p->mean) ||
             prep_triple(root, "image_std", p->std);
        for (int c = 0; !rc && c < 3; c++)
            if (!(p->std[c] != 0.0) || !isfinite(p->std[c]))
                rc = fail("%s: \"image_std\" must be nonzero", path);
    }
    cJSON_Delete(root);
    return rc;
}

/* x (3 * width * height floats) = img's pixels channels first, as the
 * model takes them ([1, 3, H, W]): rescaled, then normalized, each when
 * prep asks (transformers' ViTImageProcessor order). */
static void image_pixel_values(const rgb_image *img, const image_prep *prep,
                               float *x)
{
    const int64_t n = img->width * img->height;
    for (int c = 0; c < 3; c++)
        for (int64_t i = 0; i < n; i++) {
            double v = img->px[i * 3 + c];
            if (prep->do_rescale)
                v *= prep->rescale_factor;
            if (prep->do_normalize)
                v = (v - prep->mean[c]) / prep->std[c];
            x[c * n + i] = (float)v;
        }
}

/* The label of class i: config.json's id2label["i"] into buf, else
 * "LABEL_i" (PretrainedConfig's default names). */
static const char *label_of(const cJSON *config, int64_t i, char *buf,
                            size_t size)
{
    char key[32];
    snprintf(key, sizeof key, "%lld", (long long)i);
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(config,
                                                           "id2label");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(labels, key);
    if (cJSON_IsString(l))
        return l->valuestring;
    snprintf(buf, size, "LABEL_%lld", (long long)i);
    return buf;
}

/* --classify: the top_k classes of image file `image` for the image model
 * of checkpoint directory dir, one line each: the probability (softmax of
 * the logits, 4 decimals), a tab, the label. */
__attribute__((unused)) /* image_resize_probe.c does not classify */
static int classify_image(const tfm_module *model, const char *dir,
                          const char *image, int64_t top_k)
{
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    tfm_model_config cfg;
    if (tfm_model_get_layer_options(model, &lo) != TFM_OK ||
        tfm_model_get_config(model, &cfg) != TFM_OK)
        return fail("%s", tfm_last_error());
    if (lo.patch_size == 0)
        return fail("'%s' is not an image model (a ViT checkpoint): "
                    "--classify needs one", dir);
    if (lo.num_channels != 3)
        return fail("'%s' takes %lld channels; --classify reads RGB images",
                    dir, (long long)lo.num_channels);
    image_prep prep;
    rgb_image img = { 0, 0, NULL };
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *config = NULL;
    float *x = NULL, *logits = NULL;
    tfm_tensor *tx = NULL, *tl = NULL;
    int rc = 1;
    if (read_prep(dir, lo.image_size, &prep) || decode_image(image, &img))
        goto done;
    if (prep.do_resize &&
        resize_bilinear(&img, prep.width, prep.height))
        goto done;
    if (img.width != lo.image_size || img.height != lo.image_size) {
        fail("%s: %lld x %lld pixels after preprocessing; the model takes "
             "%lld x %lld", image, (long long)img.width,
             (long long)img.height, (long long)lo.image_size,
             (long long)lo.image_size);
        goto done;
    }
    const int64_t S = lo.image_size, V = cfg.vocab_size;
    x = malloc(sizeof *x * (size_t)(3 * S * S));
    logits = malloc(sizeof *logits * (size_t)V);
    if (!x || !logits) {
        fail("out of memory");
        goto done;
    }
    image_pixel_values(&img, &prep, x);
    const int64_t xs[4] = { 1, 3, S, S }, ls[2] = { 1, V };
    if (tfm_tensor_wrap(4, xs, x, &tx) != TFM_OK ||
        tfm_tensor_wrap(2, ls, logits, &tl) != TFM_OK ||
        tfm_model_image_logits(model, tx, tl) != TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    /* The labels' names: config.json's id2label, or a model file's
     * "id2label" metadata (Python's save writes it); else LABEL_<i>. */
    tfm_safetensors *file = NULL;
    if (access(path, F_OK) == 0) {
        if (read_json_object(path, &config))
            goto done;
    } else if (tfm_safetensors_open(dir, &file) == TFM_OK) {
        const char *meta = tfm_safetensors_metadata(file, "id2label");
        cJSON *labels = meta ? cJSON_Parse(meta) : NULL;
        if (cJSON_IsObject(labels) && (config = cJSON_CreateObject()))
            cJSON_AddItemToObject(config, "id2label", labels);
        else
            cJSON_Delete(labels);
        tfm_safetensors_close(file);
    }
    /* softmax in double, then the k largest by selection (k small) */
    double hi = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < V; i++)
        hi = logits[i] > hi ? logits[i] : hi;
    for (int64_t i = 0; i < V; i++)
        sum += exp((double)logits[i] - hi);
    const int64_t k = top_k < V ? top_k : V;
    for (int64_t r = 0; r < k; r++) {
        int64_t best = -1;
        for (int64_t i = 0; i < V; i++)
            if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best]))
                best = i;
        if (best < 0)
            break;
        char buf[48];
        printf("%.4f\t%s\n", exp((double)logits[best] - hi) / sum,
               label_of(config, best, buf, sizeof buf));
        logits[best] = NAN; /* taken */
    }
    fflush(stdout);
    rc = 0;
done:
    tfm_tensor_free(tx);
    tfm_tensor_free(tl);
    cJSON_Delete(config);
    free(x);
    free(logits);
    free(img.px);
    return rc;
}

#endif
