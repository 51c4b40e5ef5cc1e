/* Run-time version (version.h). */
#include "transformer/version.h"

int tfm_version_number(void)
{
    return TFM_VERSION_NUMBER;
}

const char *tfm_version_string(void)
{
    return TFM_VERSION_STRING;
}
