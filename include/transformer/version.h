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
#define TFM_VERSION_MINOR 3
#define TFM_VERSION_PATCH 0
#define TFM_VERSION_STRING "1.3.0"

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

/* TFM_DEPRECATED("use tfm_x_v2") marks a function that a better one
 * replaces.  It stays exported, with its documented behaviour, for the life
 * of soname 1 (docs/ABI.md): the mark only makes GCC and Clang warn
 * (-Wdeprecated-declarations) where a program calls it.  A program that
 * must keep calling one without the warning defines
 * TFM_NO_DEPRECATED_WARNINGS before including any libtransformer header;
 * the library's own build, its tests, tools and SWIG bindings do.  A
 * program may also define TFM_DEPRECATED(msg) itself. */
#ifndef TFM_DEPRECATED
#  if defined(TFM_NO_DEPRECATED_WARNINGS) || defined(TFM_BUILDING_LIBRARY) || \
      defined(SWIG)
#    define TFM_DEPRECATED(msg)
#  elif defined(__GNUC__) || defined(__clang__)
#    define TFM_DEPRECATED(msg) __attribute__((deprecated(msg)))
#  else
#    define TFM_DEPRECATED(msg)
#  endif
#endif

/* The experimental fence (docs/ABI.md, "What is not promised").  New API
 * may first be declared inside
 *
 *     #ifdef TFM_ENABLE_EXPERIMENTAL
 *     TFM_EXPERIMENTAL_API tfm_status tfm_new_thing(...);
 *     #endif
 *
 * where a program sees it only when it defines TFM_ENABLE_EXPERIMENTAL
 * before including any libtransformer header.  Such a function is exported
 * (TFM_EXPERIMENTAL_API is TFM_API) but is outside the 1.x promise: it may
 * change or disappear in any release, until a release moves it out of the
 * fence, where it falls under the promise like any other TFM_API function.
 * TFM_EXPERIMENTAL_ENABLED is 1 when the fence is open, else 0.  There is
 * no experimental API in this version. */
#define TFM_EXPERIMENTAL_API TFM_API
#if defined(TFM_ENABLE_EXPERIMENTAL)
#  define TFM_EXPERIMENTAL_ENABLED 1
#else
#  define TFM_EXPERIMENTAL_ENABLED 0
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
