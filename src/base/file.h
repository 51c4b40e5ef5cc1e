/* Internal: the one door through which the library opens a file to read
 * it (JSON and text files of tokenizers and hub directories, SentencePiece
 * models, safetensors files), and whole-file reading with a size cap.
 *
 * A file is opened without blocking (O_NONBLOCK, cleared once open, so a
 * FIFO never blocks the open) and with O_CLOEXEC, then fstat'ed: anything
 * but a regular file after following links (a FIFO, a directory, a device
 * such as /dev/zero, a socket) is refused with TFM_ERR_IO naming the path
 * and what it is.  Reading stops at the cap, checked against st_size
 * before reading and against the bytes read (a file can grow). */
#ifndef TFM_SRC_FILE_H
#define TFM_SRC_FILE_H

#include <stddef.h>

#include "transformer/status.h"

/* The caps of whole-file reads, by kind of file (docs/USAGE.md, "Files the
 * library reads"): small JSON files of a checkpoint directory
 * (config.json, model.safetensors.index.json, tokenizer_config.json,
 * special_tokens_map.json, generation_config.json,
 * preprocessor_config.json): 16 MiB; tokenizer files (tokenizer.json,
 * vocab.json / encoder.json, merges.txt / vocab.bpe, vocab.txt,
 * SentencePiece .model files): 256 MiB (the largest real ones, such as
 * Gemma's tokenizer.json, are about 35 MB). */
#define TFM__FILE_MAX_CONFIG ((size_t)16 << 20)
#define TFM__FILE_MAX_TOKENIZER ((size_t)256 << 20)

/* Opens path for reading through the door above into *fd (close it) with
 * its size in *size.  TFM_ERR_IO (cannot open, not a regular file, or
 * larger than max_bytes when max_bytes > 0) with a message naming path;
 * *fd untouched on error. */
tfm_status tfm__open_regular(const char *path, size_t max_bytes, int *fd,
                             size_t *size);

/* Whole file at path (opened by tfm__open_regular) into a new
 * NUL-terminated buffer *data of *len bytes (the NUL not counted; freed
 * with tfm__free), at most max_bytes of them.  TFM_ERR_IO (cannot open or
 * read, not a regular file, larger than max_bytes), TFM_ERR_OUT_OF_MEMORY;
 * message set, *data untouched on error. */
tfm_status tfm__read_file(const char *path, size_t max_bytes, char **data,
                          size_t *len);

/* tfm__read_file of a text file: also TFM_ERR_FORMAT when its bytes are
 * not valid UTF-8 (tfm__utf8_check), naming the byte offset and why. */
tfm_status tfm__read_text_file(const char *path, size_t max_bytes,
                               char **data, size_t *len);

/* TFM_OK, or TFM_ERR_FORMAT "<what>: not valid UTF-8 at byte N (why)"
 * when text[0..n-1] is not valid UTF-8. */
tfm_status tfm__check_utf8(const char *text, size_t n, const char *what);

#endif
