/* tfm_tokenizer_load (tokenizer.h): a GGUF file's tokenizer
 * (gguf_tokenizer.c) or, for every other path, the tokenizers layer's
 * reader (tokenizer.c: directories, vocabulary files, model files).  It
 * lives here, in the top layer, because GGUF is read here. */
#include "base/error.h"
#include "formats/gguf_model.h"
#include "tokenizers/tokenizer_impl.h"

tfm_status tfm_tokenizer_load(const char *path, tfm_tokenizer **out)
{
    if (!path)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "path is NULL");
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    if (tfm__gguf_is_file(path))
        return tfm__gguf_tokenizer_load(path, out);
    return tfm__tokenizer_load_path(path, out);
}
