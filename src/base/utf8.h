/* Internal: the one UTF-8 decoder, validator and encoder (RFC 3629: no
 * overlong forms, no UTF-16 surrogates, nothing above U+10FFFF), shared by
 * the safetensors header parser and the tokenizer so both refuse the same
 * bytes with the same reasons. */
#ifndef TFM_SRC_UTF8_H
#define TFM_SRC_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes the sequence at s[0 .. len-1] (len >= 1) into *cp and *n_bytes.
 * Returns NULL when valid; otherwise why not (a static string such as
 * "overlong encoding"), with *cp and *n_bytes unchanged. */
const char *tfm__utf8_decode(const unsigned char *s, size_t len, uint32_t *cp,
                             size_t *n_bytes);

/* NULL when s[0 .. n-1] is valid UTF-8; otherwise why not
 * (tfm__utf8_decode's reason) with *at the byte offset of the bad
 * sequence. */
const char *tfm__utf8_check(const unsigned char *s, size_t n, size_t *at);

/* Writes the 1-4 UTF-8 bytes of a valid code point c to out; returns how
 * many. */
size_t tfm__utf8_encode(uint32_t c, char *out);

#endif
