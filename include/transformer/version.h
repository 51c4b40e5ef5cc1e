/*
 * libtransformer: version and symbol visibility.
 *
 * The version macros below are the single source of truth for the library's
 * version: the build reads TFM_VERSION_MAJOR from this file to name the
 * soname (libtransformer.so.TFM_VERSION_MAJOR).  Programs compare the macros
 * (the header they were compiled against) with tfm_version_number() (the
 * library they loaded) to detect a mismatch.
 */
#ifndef TRANSFORMER_VERSION_H
#define TRANSFORMER_VERSION_H

#define TFM_VERSION_MAJOR 1
#define TFM_VERSION_MINOR 2
#define TFM_VERSION_PATCH 0
#define TFM_VERSION_STRING "1.2.0"

/* One number: MAJOR * 10000 + MINOR * 100 + PATCH (1.0.0 -> 10000). */
#define TFM_VERSION_NUMBER \
    (TFM_VERSION_MAJOR * 10000 + TFM_VERSION_MINOR * 100 + TFM_VERSION_PATCH)

/* True when the header is at least version x.y.z. */
#define TFM_AT_LEAST_VERSION(x, y, z) \
    (TFM_VERSION_NUMBER >= ((x) * 10000 + (y) * 100 + (z)))

/* TFM_API marks the exported functions; everything else is hidden. */
#if defined(_WIN32)
#  if defined(TFM_BUILDING_LIBRARY)
#    define TFM_API __declspec(dllexport)
#  else
#    define TFM_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define TFM_API __attribute__((visibility("default")))
#else
#  define TFM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Run-time twin of TFM_VERSION_NUMBER: the version of the loaded library. */
TFM_API int tfm_version_number(void);

/* Run-time twin of TFM_VERSION_STRING, e.g. "1.0.0".  Static storage. */
TFM_API const char *tfm_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_VERSION_H */
