/*
 * SWIG interface of the Lua 5.4 module transformer.core (transformer/core.so,
 * luaopen_transformer_core): the low-level API, generated from the public
 * headers, on which the idiomatic package transformer/ (init.lua ...) is built.
 *
 *   local core = require("transformer.core")
 *   local mha = core.tfm_mha_create(8, 2, 0, 0, true)   -- a module object
 *   local x = core.tensor_from_table({{{...8 numbers...}, ...}})  -- [B][L][E]
 *   local y = core.tfm_tensor_create({1, 3, 8})
 *   core.tfm_mha_forward(mha, x, x, x, {causal = "top_left"}, y, nil)
 *   print(core.tensor_to_table(y)[1][1][1])
 *
 * How the C signatures appear in Lua:
 *   - a function returning tfm_status returns nothing on TFM_OK and raises a
 *     Lua error carrying tfm_last_error() otherwise;
 *   - "T **out" parameters become return values: new objects that the
 *     garbage collector frees exactly once (close(obj) frees one earlier;
 *     it is idempotent, and a closed object raises an error when used);
 *   - the *_free functions are not exposed (the collector and close() free);
 *   - int64_t and uint64_t are Lua integers (exact, no rounding through
 *     double); a float without an integer value is refused;
 *   - shapes are Lua tables {d0, d1, ...}; token ids are tables of integers
 *     (0-based ids, as in the C API), flat {ids} or nested {{ids}, ...} for
 *     [batch][seq];
 *   - the value structs (tfm_layer_config, tfm_model_config, tfm_sampling,
 *     tfm_attention_masks, tfm_attention_config, tfm_model_options) are
 *     plain Lua tables with the C field names; enum fields take the C
 *     constant or its name ("gelu", "top_left", "half", "alibi", ...);
 *     missing fields take the defaults (tfm_attention_config_init,
 *     tfm_model_options_init), and the *_init functions return the
 *     defaults as a table;
 *   - tensors convert from and to (nested) Lua tables with the natives
 *     tensor_from_table, tensor_to_table, tensor_to_flat, tensor_shape.
 */
%module transformer_core

%{
#include <float.h>
/* The wrappers still expose the deprecated _ex twins (docs/ABI.md). */
#define TFM_NO_DEPRECATED_WARNINGS
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <transformer/transformer.h>
%}

%include <stdint.i>

/* ---- Opaque handles become classes with a destructor ---------------------
 * Declared here for SWIG only (the C structs stay opaque), so that objects
 * returned with ownership are freed by the collector through these
 * destructors, exactly once. */
%nodefaultctor tfm_tensor;
%nodefaultctor tfm_module;
%nodefaultctor tfm_tokenizer;
%nodefaultctor tfm_kv_cache;
%nodefaultctor tfm_generator;
%nodefaultctor tfm_safetensors;
%nodefaultctor tfm_safetensors_writer;
%nodefaultctor tfm_optimizer;
struct tfm_tensor {};
struct tfm_module {};
struct tfm_tokenizer {};
struct tfm_kv_cache {};
struct tfm_generator {};
struct tfm_safetensors {};
struct tfm_safetensors_writer {};
struct tfm_optimizer {};
%extend tfm_tensor { ~tfm_tensor() { tfm_tensor_free($self); } }
%extend tfm_module { ~tfm_module() { tfm_module_free($self); } }
%extend tfm_tokenizer { ~tfm_tokenizer() { tfm_tokenizer_free($self); } }
%extend tfm_kv_cache { ~tfm_kv_cache() { tfm_kv_cache_free($self); } }
%extend tfm_generator { ~tfm_generator() { tfm_generator_free($self); } }
%extend tfm_safetensors { ~tfm_safetensors() { tfm_safetensors_close($self); } }
%extend tfm_safetensors_writer {
  ~tfm_safetensors_writer() { tfm_safetensors_writer_free($self); }
}
%extend tfm_optimizer { ~tfm_optimizer() { tfm_optimizer_free($self); } }

/* ---- Helpers shared by the typemaps and the natives ---------------------- */
%{

/* The message of a failed call: the library's, or the status' name. */
static void tfml_push_status_error(lua_State *L, tfm_status st)
{
    const char *msg = tfm_last_error();
    if (!msg || !*msg)
        msg = tfm_status_string(st);
    lua_pushstring(L, msg);
}

/* Raises the library's error for a failed status (never returns). */
static int tfml_raise_status(lua_State *L, tfm_status st)
{
    tfml_push_status_error(L, st);
    return lua_error(L);
}

/* Value at idx as an exact integer, else a Lua error naming `what`. */
static lua_Integer tfml_tointeger(lua_State *L, int idx, const char *what)
{
    int ok = 0;
    lua_Integer v;
    if (lua_type(L, idx) != LUA_TNUMBER)
        luaL_error(L, "%s must be an integer, got %s", what,
                   luaL_typename(L, idx));
    v = lua_tointegerx(L, idx, &ok);
    if (!ok)
        luaL_error(L, "%s must be an integer, got %s", what,
                   lua_tostring(L, idx));
    return v;
}

/* Value at idx as a number (booleans are refused). */
static double tfml_tonumber(lua_State *L, int idx, const char *what)
{
    if (lua_type(L, idx) != LUA_TNUMBER)
        luaL_error(L, "%s must be a number, got %s", what,
                   luaL_typename(L, idx));
    return (double)lua_tonumber(L, idx);
}

/* Boolean or number (0 = false) at idx, as 0/1. */
static int tfml_toflag(lua_State *L, int idx, const char *what)
{
    if (lua_type(L, idx) == LUA_TBOOLEAN)
        return lua_toboolean(L, idx);
    if (lua_type(L, idx) == LUA_TNUMBER)
        return lua_tonumber(L, idx) != 0;
    return luaL_error(L, "%s must be a boolean, got %s", what,
                      luaL_typename(L, idx));
}

/* Scratch memory owned by the Lua collector: pushed on the stack (so it
 * lives until the calling C function returns) and freed even when an error
 * unwinds the call. */
static void *tfml_scratch(lua_State *L, size_t bytes)
{
    return lua_newuserdatauv(L, bytes ? bytes : 1, 0);
}

/* Is the value at idx an object made by this module (a SWIG object)? */
static int tfml_is_swig_object(lua_State *L, int idx)
{
    int is = 0;
    if (lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx))
        return 0;
    lua_pushstring(L, ".type");
    lua_rawget(L, -2);
    is = lua_type(L, -1) == LUA_TSTRING;
    lua_pop(L, 2);
    return is;
}

/* The handle held by the object at idx, which must be of type `ty`; raises
 * a Lua error for another value, or a closed object. */
static void *tfml_check_handle(lua_State *L, int idx, swig_type_info *ty,
                               const char *what)
{
    void *p = NULL;
    if (!tfml_is_swig_object(L, idx)
        || !SWIG_IsOK(SWIG_ConvertPtr(L, idx, &p, ty, 0)))
        luaL_error(L, "expected a %s, got %s", what, luaL_typename(L, idx));
    if (!p)
        luaL_error(L, "the %s has been closed", what);
    return p;
}

/* The Lua string at idx as a C string: an error when it holds a NUL,
 * which C would take as its end (a tensor named "w\0x" was written as
 * "w"). */
static const char *tfml_c_string(lua_State *L, int idx, const char *what)
{
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (!s)
        luaL_error(L, "%s must be a string, got %s", what,
                   luaL_typename(L, idx));
    if (strlen(s) != len)
        luaL_error(L, "%s holds a NUL character", what);
    return s;
}

/* Enum value at idx: an integer, or one of the names of enum `e` in the
 * library's table (names.h; an unknown name is an error listing the
 * allowed ones). */
static int tfml_toenum(lua_State *L, int idx, tfm_enum e, const char *what)
{
    int i, value, listed = 0;
    if (lua_type(L, idx) == LUA_TSTRING) {
        const char *s = tfml_c_string(L, idx, what);
        luaL_Buffer b;
        if (tfm_enum_from_name(e, s, &value) == TFM_OK)
            return value;
        luaL_buffinit(L, &b);
        for (i = 0; i < tfm_enum_count(e); i++) {
            const char *name = tfm_enum_name(e, i);
            if (!name)
                continue;
            luaL_addstring(&b, listed++ ? ", \"" : "\"");
            luaL_addstring(&b, name);
            luaL_addchar(&b, '"');
        }
        luaL_pushresult(&b);
        return luaL_error(L, "%s: unknown value \"%s\" (one of %s)", what, s,
                          lua_tostring(L, -1));
    }
    return (int)tfml_tointeger(L, idx, what);
}

static const char *tfml_enum_string(tfm_enum e, int v)
{
    const char *name = tfm_enum_name(e, v);
    return name ? name : "unknown";
}

/* Raises an error for a key of the table at idx that is not in `allowed`. */
static void tfml_check_keys(lua_State *L, int idx, const char *const *allowed,
                            const char *what)
{
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int i, found = 0;
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) {
            const char *k = tfml_c_string(L, -1, "a field name");
            for (i = 0; allowed[i]; i++)
                if (strcmp(allowed[i], k) == 0)
                    found = 1;
            if (!found)
                luaL_error(L, "%s: unknown field \"%s\"", what, k);
        } else {
            luaL_error(L, "%s: field names must be strings", what);
        }
    }
}

/* Pushes field `name` of the table at idx; returns 0 (and pushes nothing)
 * when it is nil.  Raw access, as every table read of this module (nested
 * tensors, ids, shapes): no metamethod runs, so no Lua code can run while
 * a function holds a handle it has already checked (a __index that closes
 * the module whose masks table it serves cannot free it under the call).
 * Lua states run one thread at a time, so that is the only way a close()
 * could interleave with a call. */
static int tfml_field(lua_State *L, int idx, const char *name)
{
    idx = lua_absindex(L, idx);
    lua_pushstring(L, name);
    if (lua_rawget(L, idx) == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    return 1;
}

/* ---- tfm_layer_config as a table ---- */
static const char *const tfml_layer_config_keys[] = {
    "d_model", "n_heads", "d_ff", "activation", "layer_norm_eps",
    "norm_first", NULL };

static void tfml_read_layer_config(lua_State *L, int idx,
                                   tfm_layer_config *c, const char *what)
{
    int64_t d_model, n_heads;
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "%s must be a table, got %s", what,
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, tfml_layer_config_keys, what);
    if (!tfml_field(L, idx, "d_model"))
        luaL_error(L, "%s: d_model is required", what);
    d_model = tfml_tointeger(L, -1, "d_model");
    lua_pop(L, 1);
    if (!tfml_field(L, idx, "n_heads"))
        luaL_error(L, "%s: n_heads is required", what);
    n_heads = tfml_tointeger(L, -1, "n_heads");
    lua_pop(L, 1);
    *c = tfm_layer_config_default(d_model, n_heads);
    if (tfml_field(L, idx, "d_ff")) {
        c->d_ff = tfml_tointeger(L, -1, "d_ff");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "activation")) {
        c->activation = (tfm_activation)tfml_toenum(L, -1, TFM_ENUM_ACTIVATION,
                                                    "activation");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "layer_norm_eps")) {
        c->layer_norm_eps = (float)tfml_tonumber(L, -1, "layer_norm_eps");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "norm_first")) {
        c->norm_first = tfml_toflag(L, -1, "norm_first");
        lua_pop(L, 1);
    }
}

static void tfml_push_layer_config(lua_State *L, const tfm_layer_config *c)
{
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, c->d_model);
    lua_setfield(L, -2, "d_model");
    lua_pushinteger(L, c->n_heads);
    lua_setfield(L, -2, "n_heads");
    lua_pushinteger(L, c->d_ff);
    lua_setfield(L, -2, "d_ff");
    lua_pushstring(L, tfml_enum_string(TFM_ENUM_ACTIVATION, c->activation));
    lua_setfield(L, -2, "activation");
    lua_pushnumber(L, c->layer_norm_eps);
    lua_setfield(L, -2, "layer_norm_eps");
    lua_pushboolean(L, c->norm_first);
    lua_setfield(L, -2, "norm_first");
}

/* ---- tfm_model_config as a table ---- */
static const char *const tfml_model_config_keys[] = {
    "architecture", "layer", "vocab_size", "n_layers", "n_encoder_layers",
    "n_decoder_layers", "context_length", "positional", "tied_embeddings",
    "embedding_scale", NULL };

static int64_t tfml_int_field(lua_State *L, int idx, const char *name)
{
    int64_t v = 0;
    if (tfml_field(L, idx, name)) {
        v = tfml_tointeger(L, -1, name);
        lua_pop(L, 1);
    }
    return v;
}

static void tfml_read_model_config(lua_State *L, int idx, tfm_model_config *c)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "the model configuration must be a table, got %s",
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, tfml_model_config_keys, "model configuration");
    memset(c, 0, sizeof *c);
    if (!tfml_field(L, idx, "architecture"))
        luaL_error(L, "model configuration: architecture is required");
    c->architecture = (tfm_architecture)tfml_toenum(L, -1, TFM_ENUM_ARCHITECTURE,
                                                    "architecture");
    lua_pop(L, 1);
    if (!tfml_field(L, idx, "layer"))
        luaL_error(L, "model configuration: layer is required");
    tfml_read_layer_config(L, -1, &c->layer, "layer");
    lua_pop(L, 1);
    c->vocab_size = tfml_int_field(L, idx, "vocab_size");
    c->n_layers = tfml_int_field(L, idx, "n_layers");
    c->n_encoder_layers = tfml_int_field(L, idx, "n_encoder_layers");
    c->n_decoder_layers = tfml_int_field(L, idx, "n_decoder_layers");
    c->context_length = tfml_int_field(L, idx, "context_length");
    c->positional = TFM_POSITIONAL_LEARNED;
    if (tfml_field(L, idx, "positional")) {
        c->positional = (tfm_positional)tfml_toenum(L, -1, TFM_ENUM_POSITIONAL,
                                                    "positional");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "tied_embeddings")) {
        c->tied_embeddings = tfml_toflag(L, -1, "tied_embeddings");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "embedding_scale")) {
        c->embedding_scale = tfml_toflag(L, -1, "embedding_scale");
        lua_pop(L, 1);
    }
}

static void tfml_push_model_config(lua_State *L, const tfm_model_config *c)
{
    lua_createtable(L, 0, 10);
    lua_pushstring(L, tfml_enum_string(TFM_ENUM_ARCHITECTURE, c->architecture));
    lua_setfield(L, -2, "architecture");
    tfml_push_layer_config(L, &c->layer);
    lua_setfield(L, -2, "layer");
    lua_pushinteger(L, c->vocab_size);
    lua_setfield(L, -2, "vocab_size");
    lua_pushinteger(L, c->n_layers);
    lua_setfield(L, -2, "n_layers");
    lua_pushinteger(L, c->n_encoder_layers);
    lua_setfield(L, -2, "n_encoder_layers");
    lua_pushinteger(L, c->n_decoder_layers);
    lua_setfield(L, -2, "n_decoder_layers");
    lua_pushinteger(L, c->context_length);
    lua_setfield(L, -2, "context_length");
    lua_pushstring(L, tfml_enum_string(TFM_ENUM_POSITIONAL, c->positional));
    lua_setfield(L, -2, "positional");
    lua_pushboolean(L, c->tied_embeddings);
    lua_setfield(L, -2, "tied_embeddings");
    lua_pushboolean(L, c->embedding_scale);
    lua_setfield(L, -2, "embedding_scale");
}

/* ---- tfm_attention_config as a table ----
 * Missing (nil) fields keep the defaults of tfm_attention_config_init;
 * struct_size is the library's business and not a field here. */
static const char *const tfml_attention_config_keys[] = {
    "score", "scale", "additive_dim", "n_kv_heads", "rope", "rope_base",
    "rope_dims", "relative", "max_distance", "relative_values",
    "num_buckets", "bidirectional", "sparsity", "window", "dilation",
    "n_global", "block_size", "n_random_blocks", "seed", NULL };

static void tfml_read_attention_config(lua_State *L, int idx,
                                       tfm_attention_config *c,
                                       const char *what)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "%s must be a table, got %s", what,
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, tfml_attention_config_keys, what);
    tfm_attention_config_init(c);
#define TFML_ENUM_FIELD(name, table, type)                                  \
    if (tfml_field(L, idx, #name)) {                                        \
        c->name = (type)tfml_toenum(L, -1, table, #name);                   \
        lua_pop(L, 1);                                                      \
    }
#define TFML_INT_FIELD(name, type)                                          \
    if (tfml_field(L, idx, #name)) {                                        \
        c->name = (type)tfml_tointeger(L, -1, #name);                       \
        lua_pop(L, 1);                                                      \
    }
#define TFML_NUMBER_FIELD(name, type)                                       \
    if (tfml_field(L, idx, #name)) {                                        \
        c->name = (type)tfml_tonumber(L, -1, #name);                        \
        lua_pop(L, 1);                                                      \
    }
#define TFML_FLAG_FIELD(name)                                               \
    if (tfml_field(L, idx, #name)) {                                        \
        c->name = tfml_toflag(L, -1, #name);                                \
        lua_pop(L, 1);                                                      \
    }
    TFML_ENUM_FIELD(score, TFM_ENUM_SCORE, tfm_score)
    /* scale is a C float: converting a finite double beyond its range is
     * undefined behaviour, so it is refused here. */
    if (tfml_field(L, idx, "scale")) {
        double v = tfml_tonumber(L, -1, "scale");
        if (isfinite(v) && fabs(v) > FLT_MAX) {
            char buf[32];   /* luaL_error has no %g */
            snprintf(buf, sizeof buf, "%g", v);
            luaL_error(L, "scale = %s is out of the float range", buf);
        }
        c->scale = (float)v;
        lua_pop(L, 1);
    }
    TFML_INT_FIELD(additive_dim, int64_t)
    TFML_INT_FIELD(n_kv_heads, int64_t)
    TFML_ENUM_FIELD(rope, TFM_ENUM_ROPE, tfm_rope)
    TFML_NUMBER_FIELD(rope_base, double)
    TFML_INT_FIELD(rope_dims, int64_t)
    TFML_ENUM_FIELD(relative, TFM_ENUM_RELATIVE, tfm_relative)
    TFML_INT_FIELD(max_distance, int64_t)
    TFML_FLAG_FIELD(relative_values)
    TFML_INT_FIELD(num_buckets, int64_t)
    TFML_FLAG_FIELD(bidirectional)
    TFML_ENUM_FIELD(sparsity, TFM_ENUM_SPARSITY, tfm_sparsity)
    TFML_INT_FIELD(window, int64_t)
    TFML_INT_FIELD(dilation, int64_t)
    TFML_INT_FIELD(n_global, int64_t)
    TFML_INT_FIELD(block_size, int64_t)
    TFML_INT_FIELD(n_random_blocks, int64_t)
    TFML_INT_FIELD(seed, uint64_t)
#undef TFML_ENUM_FIELD
#undef TFML_INT_FIELD
#undef TFML_NUMBER_FIELD
#undef TFML_FLAG_FIELD
}

/* ---- tfm_mha_options as a table: { kdim, vdim, bias, add_bias_kv,
 * add_zero_attn, attention = {...} } ---- */
static const char *const tfml_mha_options_keys[] = {
    "kdim", "vdim", "bias", "add_bias_kv", "add_zero_attn", "attention", NULL
};

static void tfml_read_mha_options(lua_State *L, int idx, tfm_mha_options *o,
                                  tfm_attention_config *attention)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "attention options must be a table, got %s",
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, tfml_mha_options_keys, "attention options");
    tfm_mha_options_init(o);
    if (tfml_field(L, idx, "kdim")) {
        o->kdim = (int64_t)tfml_tointeger(L, -1, "kdim");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "vdim")) {
        o->vdim = (int64_t)tfml_tointeger(L, -1, "vdim");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "bias")) {
        o->bias = tfml_toflag(L, -1, "bias");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "add_bias_kv")) {
        o->add_bias_kv = tfml_toflag(L, -1, "add_bias_kv");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "add_zero_attn")) {
        o->add_zero_attn = tfml_toflag(L, -1, "add_zero_attn");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "attention")) {
        tfml_read_attention_config(L, -1, attention, "attention");
        o->attention = attention;
        lua_pop(L, 1);
    }
}

/* ---- tfm_layer_options as a table: { bias = false, attention = {...} } ---- */
static const char *const tfml_layer_options_keys[] = { "bias", "attention",
                                                       NULL };

/* *o from the table at idx; a variant table is read into *attention,
 * which o->attention then points to. */
static void tfml_read_layer_options(lua_State *L, int idx,
                                    tfm_layer_options *o,
                                    tfm_attention_config *attention)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "layer options must be a table, got %s",
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, tfml_layer_options_keys, "layer options");
    tfm_layer_options_init(o);
    if (tfml_field(L, idx, "bias")) {
        o->bias = tfml_toflag(L, -1, "bias");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "attention")) {
        tfml_read_attention_config(L, -1, attention, "attention");
        o->attention = attention;
        lua_pop(L, 1);
    }
}

static void tfml_push_attention_config(lua_State *L,
                                       const tfm_attention_config *c)
{
    lua_createtable(L, 0, 19);
#define TFML_PUSH_ENUM(name, table)                                         \
    lua_pushstring(L, tfml_enum_string(table, (int)c->name));               \
    lua_setfield(L, -2, #name);
#define TFML_PUSH_INT(name)                                                 \
    lua_pushinteger(L, (lua_Integer)c->name);                               \
    lua_setfield(L, -2, #name);
#define TFML_PUSH_NUMBER(name)                                              \
    lua_pushnumber(L, (lua_Number)c->name);                                 \
    lua_setfield(L, -2, #name);
#define TFML_PUSH_FLAG(name)                                                \
    lua_pushboolean(L, c->name != 0);                                       \
    lua_setfield(L, -2, #name);
    TFML_PUSH_ENUM(score, TFM_ENUM_SCORE)
    TFML_PUSH_NUMBER(scale)
    TFML_PUSH_INT(additive_dim)
    TFML_PUSH_INT(n_kv_heads)
    TFML_PUSH_ENUM(rope, TFM_ENUM_ROPE)
    TFML_PUSH_NUMBER(rope_base)
    TFML_PUSH_INT(rope_dims)
    TFML_PUSH_ENUM(relative, TFM_ENUM_RELATIVE)
    TFML_PUSH_INT(max_distance)
    TFML_PUSH_FLAG(relative_values)
    TFML_PUSH_INT(num_buckets)
    TFML_PUSH_FLAG(bidirectional)
    TFML_PUSH_ENUM(sparsity, TFM_ENUM_SPARSITY)
    TFML_PUSH_INT(window)
    TFML_PUSH_INT(dilation)
    TFML_PUSH_INT(n_global)
    TFML_PUSH_INT(block_size)
    TFML_PUSH_INT(n_random_blocks)
    TFML_PUSH_INT(seed)
#undef TFML_PUSH_ENUM
#undef TFML_PUSH_INT
#undef TFML_PUSH_NUMBER
#undef TFML_PUSH_FLAG
}

/* ---- tfm_model_options as a table: {positional_base =, attention = {}} */
static const char *const tfml_model_options_keys[] = {
    "positional_base", "attention", NULL };

static void tfml_read_model_options(lua_State *L, int idx,
                                    tfm_model_options *o)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "the model options must be a table, got %s",
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, tfml_model_options_keys, "model options");
    tfm_model_options_init(o);
    if (tfml_field(L, idx, "positional_base")) {
        o->positional_base = tfml_tonumber(L, -1, "positional_base");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "attention")) {
        tfml_read_attention_config(L, -1, &o->attention, "attention");
        lua_pop(L, 1);
    }
}

static void tfml_push_model_options(lua_State *L, const tfm_model_options *o)
{
    lua_createtable(L, 0, 2);
    lua_pushnumber(L, o->positional_base);
    lua_setfield(L, -2, "positional_base");
    tfml_push_attention_config(L, &o->attention);
    lua_setfield(L, -2, "attention");
}

/* ---- tfm_sampling as a table ---- */
static const char *const tfml_sampling_keys[] = {
    "greedy", "temperature", "top_k", "top_p", NULL };

/* Missing fields: greedy false, temperature 1, top_k 0, top_p 1. */
static void tfml_read_sampling(lua_State *L, int idx, tfm_sampling *s)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "sampling must be a table, got %s",
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, tfml_sampling_keys, "sampling");
    s->greedy = 0;
    s->temperature = 1.0f;
    s->top_k = 0;
    s->top_p = 1.0f;
    if (tfml_field(L, idx, "greedy")) {
        s->greedy = tfml_toflag(L, -1, "greedy");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "temperature")) {
        s->temperature = (float)tfml_tonumber(L, -1, "temperature");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "top_k")) {
        s->top_k = tfml_tointeger(L, -1, "top_k");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "top_p")) {
        s->top_p = (float)tfml_tonumber(L, -1, "top_p");
        lua_pop(L, 1);
    }
}

static void tfml_push_sampling(lua_State *L, const tfm_sampling *s)
{
    lua_createtable(L, 0, 4);
    lua_pushboolean(L, s->greedy);
    lua_setfield(L, -2, "greedy");
    lua_pushnumber(L, s->temperature);
    lua_setfield(L, -2, "temperature");
    lua_pushinteger(L, s->top_k);
    lua_setfield(L, -2, "top_k");
    lua_pushnumber(L, s->top_p);
    lua_setfield(L, -2, "top_p");
}

/* ---- tfm_attention_masks as a table ---- */
static const char *const tfml_masks_keys[] = {
    "causal", "key_padding_mask", "key_padding_kind", "attn_mask",
    "attn_mask_kind", NULL };

static void tfml_read_masks(lua_State *L, int idx, tfm_attention_masks *m)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "masks must be a table or nil, got %s",
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, tfml_masks_keys, "masks");
    memset(m, 0, sizeof *m);
    if (tfml_field(L, idx, "causal")) {
        if (lua_type(L, -1) == LUA_TBOOLEAN)
            m->causal = lua_toboolean(L, -1) ? TFM_CAUSAL_TOP_LEFT
                                             : TFM_CAUSAL_NONE;
        else
            m->causal = (tfm_causal)tfml_toenum(L, -1, TFM_ENUM_CAUSAL, "causal");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "key_padding_mask")) {
        m->key_padding_mask = (const tfm_tensor *)tfml_check_handle(
            L, -1, SWIGTYPE_p_tfm_tensor, "tensor (key_padding_mask)");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "key_padding_kind")) {
        m->key_padding_kind = (tfm_mask_kind)tfml_toenum(
            L, -1, TFM_ENUM_MASK_KIND, "key_padding_kind");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "attn_mask")) {
        m->attn_mask = (const tfm_tensor *)tfml_check_handle(
            L, -1, SWIGTYPE_p_tfm_tensor, "tensor (attn_mask)");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "attn_mask_kind")) {
        m->attn_mask_kind = (tfm_mask_kind)tfml_toenum(
            L, -1, TFM_ENUM_MASK_KIND, "attn_mask_kind");
        lua_pop(L, 1);
    }
}

/* ---- Token ids ----
 * A flat table {ids} (one sequence) or a nested one {{ids}, ...} (rows of
 * equal length) -> int32 scratch array, *batch rows of *seq ids. */
static int32_t *tfml_read_ids(lua_State *L, int idx, int64_t *batch,
                              int64_t *seq, const char *what)
{
    int64_t b, i, B, S;
    int nested;
    int32_t *ids;
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "%s must be a table of token ids, got %s", what,
                   luaL_typename(L, idx));
    B = (int64_t)lua_rawlen(L, idx);
    if (B < 1)
        luaL_error(L, "%s is empty", what);
    lua_rawgeti(L, idx, 1);
    nested = lua_istable(L, -1);
    S = nested ? (int64_t)lua_rawlen(L, -1) : B;
    lua_pop(L, 1);
    if (!nested)
        B = 1;
    if (S < 1)
        luaL_error(L, "%s has an empty row", what);
    if ((uint64_t)B * (uint64_t)S > (uint64_t)(SIZE_MAX / sizeof(int32_t)))
        luaL_error(L, "%s is too large", what);
    ids = (int32_t *)tfml_scratch(L, (size_t)(B * S) * sizeof(int32_t));
    for (b = 0; b < B; b++) {
        int row = idx;
        if (nested) {
            lua_rawgeti(L, idx, b + 1);
            if (!lua_istable(L, -1) || (int64_t)lua_rawlen(L, -1) != S)
                luaL_error(L, "%s: row %d is not a table of %d ids", what,
                           (int)(b + 1), (int)S);
            row = lua_gettop(L);
        }
        for (i = 0; i < S; i++) {
            lua_Integer v;
            int ok = 0;
            lua_rawgeti(L, row, i + 1);
            v = lua_tointegerx(L, -1, &ok);
            if (!ok || lua_type(L, -1) != LUA_TNUMBER)
                luaL_error(L, "%s: token ids must be integers (got %s)", what,
                           luaL_typename(L, -1));
            if (v < INT32_MIN || v > INT32_MAX)
                luaL_error(L, "%s: token id %I out of range", what, v);
            ids[b * S + i] = (int32_t)v;
            lua_pop(L, 1);
        }
        if (nested)
            lua_pop(L, 1);
    }
    *batch = B;
    *seq = S;
    return ids;
}

static void tfml_push_ids(lua_State *L, const int32_t *ids, int64_t n)
{
    int64_t i;
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* ---- Tensors from and to tables ---- */

/* Walks the nested table at idx down its first elements: its shape. */
static int tfml_infer_shape(lua_State *L, int idx, int64_t *shape)
{
    int rank = 0;
    lua_pushvalue(L, idx);
    while (lua_istable(L, -1)) {
        int64_t n = (int64_t)lua_rawlen(L, -1);
        if (rank == TFM_MAX_RANK)
            luaL_error(L, "tables nested deeper than %d levels are not "
                       "supported (rank > %d)", TFM_MAX_RANK, TFM_MAX_RANK);
        if (n < 1)
            luaL_error(L, "empty table at depth %d (every dimension must be "
                       "at least 1)", rank + 1);
        shape[rank++] = n;
        lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
    return rank;
}

/* kind of the leaves: 0 unknown yet, 1 numbers, 2 booleans. */
static void tfml_fill(lua_State *L, int idx, const int64_t *shape, int rank,
                      int depth, float **dst, int *kind, int64_t *path)
{
    int64_t i, n = shape[depth];
    if (!lua_istable(L, idx) || (int64_t)lua_rawlen(L, idx) != n) {
        char where[96] = "";
        int d, len = 0;
        for (d = 0; d < depth && len < 80; d++)
            len += snprintf(where + len, sizeof where - len, "[%lld]",
                            (long long)path[d]);
        luaL_error(L, "ragged table: element%s should be a table of %d "
                   "values, got %s%s", where, (int)n,
                   lua_istable(L, idx) ? "one of length " : "a ",
                   lua_istable(L, idx)
                       ? lua_pushfstring(L, "%d", (int)lua_rawlen(L, idx))
                       : luaL_typename(L, idx));
    }
    for (i = 0; i < n; i++) {
        path[depth] = i + 1;
        lua_rawgeti(L, idx, i + 1);
        if (depth + 1 < rank) {
            tfml_fill(L, lua_gettop(L), shape, rank, depth + 1, dst, kind,
                      path);
        } else {
            int t = lua_type(L, -1);
            if (t == LUA_TNUMBER) {
                if (*kind == 2)
                    luaL_error(L, "a table mixes booleans and numbers");
                *kind = 1;
                *(*dst)++ = (float)lua_tonumber(L, -1);
            } else if (t == LUA_TBOOLEAN) {
                if (*kind == 1)
                    luaL_error(L, "a table mixes booleans and numbers");
                *kind = 2;
                *(*dst)++ = lua_toboolean(L, -1) ? 1.0f : 0.0f;
            } else {
                luaL_error(L, "tensor values must be numbers or booleans, "
                           "got %s", luaL_typename(L, -1));
            }
        }
        lua_pop(L, 1);
    }
}

/* Reads a shape table {d0, ...} at idx. */
static int tfml_read_shape(lua_State *L, int idx, int64_t *shape,
                           int max_rank)
{
    int i, rank;
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        luaL_error(L, "a shape must be a table of integers, got %s",
                   luaL_typename(L, idx));
    rank = (int)lua_rawlen(L, idx);
    if (rank < 1 || rank > max_rank)
        luaL_error(L, "rank %d is not supported (1 to %d)", rank, max_rank);
    for (i = 0; i < rank; i++) {
        lua_rawgeti(L, idx, i + 1);
        shape[i] = tfml_tointeger(L, -1, "a dimension");
        lua_pop(L, 1);
    }
    return rank;
}

static void tfml_push_shape(lua_State *L, int rank, const int64_t *shape)
{
    int i;
    lua_createtable(L, rank, 0);
    for (i = 0; i < rank; i++) {
        lua_pushinteger(L, shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static int64_t tfml_numel(lua_State *L, int rank, const int64_t *shape)
{
    int i;
    int64_t n = 1;
    for (i = 0; i < rank; i++) {
        if (shape[i] < 1)
            luaL_error(L, "every dimension must be at least 1, got %I",
                       (lua_Integer)shape[i]);
        if (n > INT64_MAX / shape[i])
            luaL_error(L, "the shape's size overflows");
        n *= shape[i];
    }
    return n;
}

/* tensor_from_table(t [, shape]) -> tensor, is_boolean
 * t: nested table of numbers or booleans (true -> 1, false -> 0), its
 * shape read from the nesting (rank 1 to 4, rectangular).  shape: optional
 * shape of the tensor, which then holds the same values in row-major order
 * (t may be flat or nested, the element counts must agree). */
static int tfml_tensor_from_table(lua_State *L)
{
    /* Arguments at fixed indices: scratch memory goes above them. */
    lua_settop(L, 2);
    int64_t shape[TFM_MAX_RANK], out_shape[TFM_MAX_RANK], path[TFM_MAX_RANK];
    int rank, out_rank, kind = 0;
    int64_t numel;
    tfm_tensor *t = NULL;
    float *dst;
    tfm_status st;
    if (!lua_istable(L, 1))
        return luaL_error(L, "expected a table of numbers, got %s",
                          luaL_typename(L, 1));
    rank = tfml_infer_shape(L, 1, shape);
    numel = tfml_numel(L, rank, shape);
    out_rank = rank;
    memcpy(out_shape, shape, sizeof shape);
    if (!lua_isnoneornil(L, 2)) {
        out_rank = tfml_read_shape(L, 2, out_shape, TFM_MAX_RANK);
        if (tfml_numel(L, out_rank, out_shape) != numel)
            return luaL_error(L, "cannot view %I values as the given shape "
                              "(%I values)", (lua_Integer)numel,
                              (lua_Integer)tfml_numel(L, out_rank, out_shape));
    }
    tfm_clear_error();
    st = tfm_tensor_create(out_rank, out_shape, &t);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    /* Owned by the collector from here on, even if filling fails. */
    SWIG_NewPointerObj(L, t, SWIGTYPE_p_tfm_tensor, 1);
    dst = tfm_tensor_data(t);
    tfml_fill(L, 1, shape, rank, 0, &dst, &kind, path);
    lua_pushboolean(L, kind == 2);
    return 2;
}

static void tfml_push_nested(lua_State *L, const float **src,
                             const int64_t *shape, int rank, int depth)
{
    int64_t i, n = shape[depth];
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        if (depth + 1 < rank)
            tfml_push_nested(L, src, shape, rank, depth + 1);
        else
            lua_pushnumber(L, (lua_Number)*(*src)++);
        lua_rawseti(L, -2, i + 1);
    }
}

static int tfml_get_shape(const tfm_tensor *t, int64_t *shape)
{
    int i, rank = tfm_tensor_rank(t);
    for (i = 0; i < rank; i++)
        shape[i] = tfm_tensor_dim(t, i);
    return rank;
}

/* tensor_to_table(tensor [, shape]) -> nested table of numbers; shape:
 * optional, views the values (row-major) with another shape of the same
 * element count. */
static int tfml_tensor_to_table(lua_State *L)
{
    /* Arguments at fixed indices: scratch memory goes above them. */
    lua_settop(L, 2);
    int64_t shape[TFM_MAX_RANK];
    const tfm_tensor *t = (const tfm_tensor *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tensor, "tensor");
    int rank = tfml_get_shape(t, shape);
    const float *src = tfm_tensor_data_const(t);
    if (!lua_isnoneornil(L, 2)) {
        rank = tfml_read_shape(L, 2, shape, TFM_MAX_RANK);
        if (tfml_numel(L, rank, shape) != tfm_tensor_numel(t))
            return luaL_error(L, "cannot view %I values as the given shape",
                              (lua_Integer)tfm_tensor_numel(t));
    }
    luaL_checkstack(L, rank + 4, "tensor too deep");
    tfml_push_nested(L, &src, shape, rank, 0);
    return 1;
}

/* tensor_to_flat(tensor) -> flat table (row-major), shape table */
static int tfml_tensor_to_flat(lua_State *L)
{
    int64_t shape[TFM_MAX_RANK], i, n;
    const tfm_tensor *t = (const tfm_tensor *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tensor, "tensor");
    int rank = tfml_get_shape(t, shape);
    const float *src = tfm_tensor_data_const(t);
    n = tfm_tensor_numel(t);
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        lua_pushnumber(L, (lua_Number)src[i]);
        lua_rawseti(L, -2, i + 1);
    }
    tfml_push_shape(L, rank, shape);
    return 2;
}

/* tensor_shape(tensor) -> shape table */
static int tfml_tensor_shape(lua_State *L)
{
    int64_t shape[TFM_MAX_RANK];
    const tfm_tensor *t = (const tfm_tensor *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tensor, "tensor");
    int rank = tfml_get_shape(t, shape);
    tfml_push_shape(L, rank, shape);
    return 1;
}

/* ---- Lifetimes: who refers to whom (bindings/lua/lifetimes.h) ---- */
#include "lifetimes.h"
/* ---- Paths, without opening them; INSTALLED_MODEL (files.h) ---- */
#include "files.h"

/* ---- Natives for the signatures that typemaps do not fit ---- */

/* model_generate(model, prompt_ids, max_new [, sampling [, seed]]) -> ids
 * (tfm_model_generate; sampling nil means greedy, seed defaults to 0). */
static int tfml_model_generate(lua_State *L)
{
    /* Arguments at fixed indices: scratch memory goes above them. */
    lua_settop(L, 5);
    const tfm_module *model = (const tfm_module *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_module, "model");
    int64_t batch, n_prompt, max_new;
    const int32_t *prompt = tfml_read_ids(L, 2, &batch, &n_prompt, "prompt");
    tfm_sampling sampling, *sp = NULL;
    uint64_t seed = 0;
    int32_t *out;
    tfm_status st;
    if (batch != 1)
        return luaL_error(L, "prompt must be one sequence of ids");
    max_new = tfml_tointeger(L, 3, "max_new");
    if (max_new < 0 || max_new > TFM_MAX_NEW_TOKENS)
        return luaL_error(L, "max_new must be from 0 to TFM_MAX_NEW_TOKENS "
                          "(%I), got %I", (lua_Integer)TFM_MAX_NEW_TOKENS,
                          (lua_Integer)max_new);
    if (!lua_isnoneornil(L, 4)) {
        tfml_read_sampling(L, 4, &sampling);
        sp = &sampling;
    }
    if (!lua_isnoneornil(L, 5))
        seed = (uint64_t)tfml_tointeger(L, 5, "seed");
    out = (int32_t *)tfml_scratch(L, (size_t)(max_new ? max_new : 1)
                                         * sizeof(int32_t));
    tfm_clear_error();
    st = tfm_model_generate(model, prompt, n_prompt, max_new, sp, seed, out);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    tfml_push_ids(L, out, max_new);
    return 1;
}

/* Reads the generation options table at idx into *o (absent keys take
 * tfm_generate_options_init's defaults): max_new_tokens, min_new_tokens,
 * sampling (a sampling table), seed, eos_token_id (a table of ids),
 * stop_strings (a table of strings), repetition_penalty,
 * no_repeat_ngram_size, past_context (a tfm_past_context).  The arrays
 * stay on the stack (scratch above the arguments) until the calling
 * function returns; the library copies them.  Raises a Lua error on a
 * malformed table. */
static void tfml_read_generate_options(lua_State *L, int idx,
                                       tfm_generate_options *o_out)
{
    static const char *const keys[] = {
        "max_new_tokens", "min_new_tokens", "sampling", "seed",
        "eos_token_id", "stop_strings", "repetition_penalty",
        "no_repeat_ngram_size", "past_context", NULL };
    tfm_generate_options o;
    int64_t i, n;
    if (!lua_istable(L, idx))
        luaL_error(L, "options must be a table, got %s",
                   luaL_typename(L, idx));
    tfml_check_keys(L, idx, keys, "options");
    tfm_generate_options_init(&o);
    if (tfml_field(L, idx, "max_new_tokens")) {
        o.max_new_tokens = tfml_tointeger(L, -1, "max_new_tokens");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "min_new_tokens")) {
        o.min_new_tokens = tfml_tointeger(L, -1, "min_new_tokens");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "sampling")) {
        tfml_read_sampling(L, -1, &o.sampling);
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "seed")) {
        o.seed = (uint64_t)tfml_tointeger(L, -1, "seed");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "repetition_penalty")) {
        o.repetition_penalty =
            (float)tfml_tonumber(L, -1, "repetition_penalty");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "no_repeat_ngram_size")) {
        o.no_repeat_ngram_size = tfml_tointeger(L, -1, "no_repeat_ngram_size");
        lua_pop(L, 1);
    }
    if (tfml_field(L, idx, "past_context")) {
        o.past_context =
            (tfm_past_context)tfml_tointeger(L, -1, "past_context");
        lua_pop(L, 1);
    }
    /* The arrays stay on the stack (scratch above the arguments) until the
     * call returns; tfm_generator_create copies them. */
    if (tfml_field(L, idx, "eos_token_id")) {
        int t = lua_gettop(L);
        int32_t *eos;
        if (!lua_istable(L, t))
            luaL_error(L, "eos_token_id must be a table of ids");
        n = (int64_t)lua_rawlen(L, t);
        eos = (int32_t *)tfml_scratch(L, (size_t)(n ? n : 1) * sizeof *eos);
        for (i = 0; i < n; i++) {
            lua_Integer v;
            lua_rawgeti(L, t, i + 1);
            v = tfml_tointeger(L, -1, "eos_token_id");
            lua_pop(L, 1);
            if (v < INT32_MIN || v > INT32_MAX)
                luaL_error(L, "eos_token_id %I is outside the "
                                  "vocabulary", v);
            eos[i] = (int32_t)v;
        }
        o.eos_token_ids = eos;
        o.n_eos_token_ids = n;
    }
    if (tfml_field(L, idx, "stop_strings")) {
        int t = lua_gettop(L);
        const char **stops;
        if (!lua_istable(L, t))
            luaL_error(L, "stop_strings must be a table of strings");
        n = (int64_t)lua_rawlen(L, t);
        stops = (const char **)tfml_scratch(L, (size_t)(n ? n : 1)
                                                   * sizeof *stops);
        for (i = 0; i < n; i++) {
            lua_rawgeti(L, t, i + 1);
            if (lua_type(L, -1) != LUA_TSTRING)
                luaL_error(L, "stop_strings[%d] must be a string, "
                                  "got %s", (int)(i + 1),
                                  luaL_typename(L, -1));
            stops[i] = tfml_c_string(L, -1, "a stop string"); /* the table's */
            lua_pop(L, 1);
        }
        o.stop_strings = stops;
        o.n_stop_strings = n;
    }
    *o_out = o;
}

/* generator_create(model, prompt_ids, options [, tokenizer [, cache]]) ->
 * generator (tfm_generator_create; options as tfml_read_generate_options
 * reads them; cache: options.cache, prefix reuse, which
 * transformer/generation.lua keeps alive and closes the generator before).  The generator keeps the
 * model alive and is closed with it. */
static int tfml_generator_create(lua_State *L)
{
    lua_settop(L, 5);
    const tfm_module *model = (const tfm_module *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_module, "model");
    int64_t batch, n_prompt;
    const int32_t *prompt = tfml_read_ids(L, 2, &batch, &n_prompt, "prompt");
    tfm_generate_options o;
    tfm_generator *g = NULL;
    tfm_status st;
    if (batch != 1)
        return luaL_error(L, "prompt must be one sequence of ids");
    tfml_read_generate_options(L, 3, &o);
    if (!lua_isnil(L, 4))
        o.tokenizer = (const tfm_tokenizer *)tfml_check_handle(
            L, 4, SWIGTYPE_p_tfm_tokenizer, "tokenizer");
    if (!lua_isnil(L, 5))
        o.cache = (tfm_kv_cache *)tfml_check_handle(
            L, 5, SWIGTYPE_p_tfm_kv_cache, "past_key_values");
    tfm_clear_error();
    st = tfm_generator_create(model, prompt, n_prompt, &o, &g);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    SWIG_NewPointerObj(L, g, SWIGTYPE_p_tfm_generator, 1);
    tfml_depend(L, -1, 1);   /* the model, tokenizer and cache */
    tfml_depend(L, -1, 4);
    tfml_depend(L, -1, 5);
    return 1;
}

/* model_generate_batch(model, ids, lengths, options [, tokenizer]) ->
 * a table of tables of new ids (tfm_model_generate_batch): the prompts
 * laid end to end in the flat table ids, lengths a table of their
 * lengths; options as generator_create's. */
static int tfml_model_generate_batch(lua_State *L)
{
    lua_settop(L, 5);
    const tfm_module *model = (const tfm_module *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_module, "model");
    int64_t rows, total, b, k, at = 0, B;
    const int32_t *flat = tfml_read_ids(L, 2, &rows, &total, "prompts");
    tfm_generate_options o;
    const int32_t **prompts;
    int64_t *lengths, *n_out;
    int32_t *out;
    tfm_status st;
    if (rows != 1)
        return luaL_error(L, "prompts must be laid end to end");
    if (!lua_istable(L, 3))
        return luaL_error(L, "lengths must be a table");
    B = (int64_t)lua_rawlen(L, 3);
    tfml_read_generate_options(L, 4, &o);
    if (!lua_isnil(L, 5))
        o.tokenizer = (const tfm_tokenizer *)tfml_check_handle(
            L, 5, SWIGTYPE_p_tfm_tokenizer, "tokenizer");
    if (o.max_new_tokens < 0 || o.max_new_tokens > TFM_MAX_NEW_TOKENS)
        return luaL_error(L, "max_new_tokens must be in 0 .. %d",
                          TFM_MAX_NEW_TOKENS);
    if (B > 0 && o.max_new_tokens > (int64_t)(SIZE_MAX / 8) / B)
        return luaL_error(L, "too many tokens");
    prompts = (const int32_t **)tfml_scratch(L, (size_t)(B ? B : 1)
                                                    * sizeof *prompts);
    lengths = (int64_t *)tfml_scratch(L, (size_t)(B ? B : 1) * sizeof *lengths);
    n_out = (int64_t *)tfml_scratch(L, (size_t)(B ? B : 1) * sizeof *n_out);
    out = (int32_t *)tfml_scratch(L, (size_t)(B * o.max_new_tokens)
                                         * sizeof *out);
    for (b = 0; b < B; b++) {
        lua_Integer n;
        lua_rawgeti(L, 3, b + 1);
        n = tfml_tointeger(L, -1, "length");
        lua_pop(L, 1);
        if (n < 0 || n > total - at)
            return luaL_error(L, "lengths do not fit the prompt ids");
        prompts[b] = flat + at;
        lengths[b] = n;
        at += n;
    }
    tfm_clear_error();
    st = tfm_model_generate_batch(model, prompts, lengths, B, &o, out, n_out,
                                  NULL);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    lua_createtable(L, (int)B, 0);
    for (b = 0; b < B; b++) {
        lua_createtable(L, (int)n_out[b], 0);
        for (k = 0; k < n_out[b]; k++) {
            lua_pushinteger(L, out[b * o.max_new_tokens + k]);
            lua_rawseti(L, -2, k + 1);
        }
        lua_rawseti(L, -2, b + 1);
    }
    return 1;
}

/* generator_next(generator) -> the next id, or nil once it has ended. */
static int tfml_generator_next(lua_State *L)
{
    tfm_generator *g = (tfm_generator *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_generator, "generator");
    int32_t id = 0;
    int produced = 0;
    tfm_status st;
    tfm_clear_error();
    st = tfm_generator_next(g, &id, &produced);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    if (produced)
        lua_pushinteger(L, id);
    else
        lua_pushnil(L);
    return 1;
}

/* model_beam_search(model, prompt_ids, options) -> sequences, scores
 * (tfm_model_beam_search): sequences a table of num_return_sequences
 * tables of new ids, best first, scores a table of their scores.  options:
 * num_beams, max_new_tokens, min_new_tokens, length_penalty,
 * early_stopping (0 False, 1 True, 2 "never"), num_return_sequences,
 * eos_token_id, decoder_start_token_id, suppress_tokens (a table of
 * ids), forced_eos_token_id, renormalize_logits (a boolean); absent keys
 * take tfm_beam_search_options_init's defaults. */
static int tfml_model_beam_search(lua_State *L)
{
    static const char *const keys[] = {
        "num_beams", "max_new_tokens", "min_new_tokens", "length_penalty",
        "early_stopping", "num_return_sequences", "eos_token_id",
        "decoder_start_token_id", "suppress_tokens", "forced_eos_token_id",
        "renormalize_logits", NULL };
    lua_settop(L, 3);
    const tfm_module *model = (const tfm_module *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_module, "model");
    int64_t batch, n_prompt, r, i;
    const int32_t *prompt = tfml_read_ids(L, 2, &batch, &n_prompt, "prompt");
    tfm_beam_search_options o;
    lua_Integer v;
    tfm_status st;
    if (batch != 1)
        return luaL_error(L, "prompt must be one sequence of ids");
    if (!lua_istable(L, 3))
        return luaL_error(L, "options must be a table, got %s",
                          luaL_typename(L, 3));
    tfml_check_keys(L, 3, keys, "options");
    tfm_beam_search_options_init(&o);
    if (tfml_field(L, 3, "num_beams")) {
        o.num_beams = tfml_tointeger(L, -1, "num_beams");
        lua_pop(L, 1);
    }
    if (tfml_field(L, 3, "max_new_tokens")) {
        o.max_new_tokens = tfml_tointeger(L, -1, "max_new_tokens");
        lua_pop(L, 1);
    }
    if (tfml_field(L, 3, "min_new_tokens")) {
        o.min_new_tokens = tfml_tointeger(L, -1, "min_new_tokens");
        lua_pop(L, 1);
    }
    if (tfml_field(L, 3, "length_penalty")) {
        o.length_penalty = tfml_tonumber(L, -1, "length_penalty");
        lua_pop(L, 1);
    }
    if (tfml_field(L, 3, "early_stopping")) {
        v = tfml_tointeger(L, -1, "early_stopping");
        lua_pop(L, 1);
        o.early_stopping = v >= 0 && v <= 2 ? (int)v : -1;
    }
    if (tfml_field(L, 3, "num_return_sequences")) {
        o.num_return_sequences = tfml_tointeger(L, -1,
                                                "num_return_sequences");
        lua_pop(L, 1);
    }
    if (tfml_field(L, 3, "eos_token_id")) {
        v = tfml_tointeger(L, -1, "eos_token_id");
        lua_pop(L, 1);
        o.eos_token_id = v >= -1 && v <= INT32_MAX ? (int32_t)v : -2;
    }
    if (tfml_field(L, 3, "decoder_start_token_id")) {
        v = tfml_tointeger(L, -1, "decoder_start_token_id");
        lua_pop(L, 1);
        o.decoder_start_token_id = v >= 0 && v <= INT32_MAX ? (int32_t)v : -1;
    }
    if (tfml_field(L, 3, "forced_eos_token_id")) {
        v = tfml_tointeger(L, -1, "forced_eos_token_id");
        lua_pop(L, 1);
        o.forced_eos_token_id = v >= -1 && v <= INT32_MAX ? (int32_t)v : -2;
    }
    if (tfml_field(L, 3, "renormalize_logits")) {
        o.renormalize_logits = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    if (tfml_field(L, 3, "suppress_tokens")) {
        int t = lua_gettop(L);
        int32_t *ban;
        if (!lua_istable(L, t))
            return luaL_error(L, "suppress_tokens must be a table of ids");
        o.n_suppress_tokens = (int64_t)lua_rawlen(L, t);
        ban = (int32_t *)tfml_scratch(
            L, (size_t)(o.n_suppress_tokens ? o.n_suppress_tokens : 1) *
                   sizeof *ban);
        for (i = 0; i < o.n_suppress_tokens; i++) {
            lua_rawgeti(L, t, i + 1);
            v = tfml_tointeger(L, -1, "suppress_tokens");
            lua_pop(L, 1);
            if (v < 0 || v > INT32_MAX)
                return luaL_error(L, "suppress_tokens[%d] = %I is outside "
                                  "the vocabulary", (int)(i + 1), v);
            ban[i] = (int32_t)v;
        }
        o.suppress_tokens = ban;
        lua_pop(L, 1);
    }
    tfm_clear_error();
    /* The outputs' sizes only once the options are known to be valid: a
     * call with no outputs reports what is wrong with them first. */
    if (o.num_return_sequences < 1 || o.max_new_tokens < 1 ||
        o.max_new_tokens > TFM_MAX_NEW_TOKENS ||
        o.num_return_sequences > o.num_beams) {
        st = tfm_model_beam_search(model, prompt, n_prompt, &o, NULL, NULL,
                                   NULL);
        return tfml_raise_status(L, st != TFM_OK ? st
                                                 : TFM_ERR_INVALID_ARGUMENT);
    }
    const int64_t R = o.num_return_sequences, M = o.max_new_tokens;
    int32_t *ids = (int32_t *)tfml_scratch(L, (size_t)(R * M) * sizeof *ids);
    int64_t *lengths = (int64_t *)tfml_scratch(L, (size_t)R * sizeof *lengths);
    float *scores = (float *)tfml_scratch(L, (size_t)R * sizeof *scores);
    st = tfm_model_beam_search(model, prompt, n_prompt, &o, ids, lengths,
                               scores);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    lua_createtable(L, (int)R, 0);
    for (r = 0; r < R; r++) {
        lua_createtable(L, (int)lengths[r], 0);
        for (i = 0; i < lengths[r]; i++) {
            lua_pushinteger(L, ids[r * M + i]);
            lua_rawseti(L, -2, i + 1);
        }
        lua_rawseti(L, -2, r + 1);
    }
    lua_createtable(L, (int)R, 0);
    for (r = 0; r < R; r++) {
        lua_pushnumber(L, scores[r]);
        lua_rawseti(L, -2, r + 1);
    }
    return 2;
}

/* model_seq2seq_logits(model, src_ids, tgt_ids, logits): src [B][S] and
 * tgt [B][L] ids (flat tables for B = 1) into logits [B, L, vocab]. */
static int tfml_model_seq2seq_logits(lua_State *L)
{
    /* Arguments at fixed indices: scratch memory goes above them. */
    lua_settop(L, 4);
    const tfm_module *model = (const tfm_module *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_module, "model");
    int64_t sb, S, tb, T;
    const int32_t *src = tfml_read_ids(L, 2, &sb, &S, "source ids");
    const int32_t *tgt = tfml_read_ids(L, 3, &tb, &T, "target ids");
    tfm_tensor *logits = (tfm_tensor *)tfml_check_handle(
        L, 4, SWIGTYPE_p_tfm_tensor, "tensor (logits)");
    tfm_status st;
    if (sb != tb)
        return luaL_error(L, "source ids have %I sequences, target ids %I",
                          (lua_Integer)sb, (lua_Integer)tb);
    tfm_clear_error();
    st = tfm_model_seq2seq_logits(model, src, S, tgt, T, sb, logits);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    return 0;
}

/* model_seq2seq_backward(model, src_ids, tgt_ids, grad_logits): the
 * backward of model_seq2seq_logits (tfm_model_seq2seq_backward). */
static int tfml_model_seq2seq_backward(lua_State *L)
{
    lua_settop(L, 4);
    tfm_module *model = (tfm_module *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_module, "model");
    int64_t sb, S, tb, T;
    const int32_t *src = tfml_read_ids(L, 2, &sb, &S, "source ids");
    const int32_t *tgt = tfml_read_ids(L, 3, &tb, &T, "target ids");
    const tfm_tensor *g = (const tfm_tensor *)tfml_check_handle(
        L, 4, SWIGTYPE_p_tfm_tensor, "tensor (grad_logits)");
    tfm_status st;
    if (sb != tb)
        return luaL_error(L, "source ids have %I sequences, target ids %I",
                          (lua_Integer)sb, (lua_Integer)tb);
    tfm_clear_error();
    st = tfm_model_seq2seq_backward(model, src, S, tgt, T, sb, g);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    return 0;
}

/* cross_entropy(logits, targets, ignore_index, label_smoothing, dlogits)
 * -> the mean loss (tfm_cross_entropy): logits [B, L, C] tensor, targets
 * {{...}, ...} [B][L] class indices (flat for B = 1), dlogits a tensor of
 * logits' shape (written) or nil. */
static int tfml_cross_entropy(lua_State *L)
{
    lua_settop(L, 5);
    const tfm_tensor *logits = (const tfm_tensor *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tensor, "tensor (logits)");
    int64_t B, T;
    const int32_t *targets = tfml_read_ids(L, 2, &B, &T, "targets");
    lua_Integer ignore = luaL_checkinteger(L, 3);
    float smoothing = (float)luaL_checknumber(L, 4);
    tfm_tensor *dlogits = lua_isnil(L, 5) ? NULL
        : (tfm_tensor *)tfml_check_handle(L, 5, SWIGTYPE_p_tfm_tensor,
                                          "tensor (dlogits)");
    float loss = 0.0f;
    tfm_status st;
    int64_t rows = 1;
    int rank = tfm_tensor_rank(logits), i;
    for (i = 0; i + 1 < rank; i++)
        rows *= tfm_tensor_dim(logits, i);
    if (B * T != rows)
        return luaL_error(L, "targets hold %I ids for %I rows of logits",
                          (lua_Integer)(B * T), (lua_Integer)rows);
    if (ignore < INT32_MIN || ignore > INT32_MAX)
        return luaL_error(L, "ignore_index %I is out of range", ignore);
    tfm_clear_error();
    st = tfm_cross_entropy(logits, targets, (int32_t)ignore, smoothing,
                           TFM_REDUCTION_MEAN, &loss, dlogits);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    lua_pushnumber(L, loss);
    return 1;
}

/* model_loss_backward(model, ids, targets, ignore_index, label_smoothing,
 * grad_scale) -> loss (tfm_model_loss_backward, the mean reduction): ids
 * and targets [B][L] (flat tables for B = 1) of the same shape. */
static int tfml_model_loss_backward(lua_State *L)
{
    lua_settop(L, 6);
    tfm_module *model = (tfm_module *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_module, "model");
    int64_t B, T, TB, TT;
    const int32_t *ids = tfml_read_ids(L, 2, &B, &T, "ids");
    const int32_t *targets = tfml_read_ids(L, 3, &TB, &TT, "targets");
    lua_Integer ignore = luaL_checkinteger(L, 4);
    float smoothing = (float)luaL_checknumber(L, 5);
    float scale = (float)luaL_checknumber(L, 6);
    float loss = 0.0f;
    tfm_status st;
    if (TB != B || TT != T)
        return luaL_error(L, "targets must have the shape of ids");
    if (ignore < INT32_MIN || ignore > INT32_MAX)
        return luaL_error(L, "ignore_index %I is out of range", ignore);
    tfm_clear_error();
    st = tfm_model_loss_backward(model, ids, B, T, targets, (int32_t)ignore,
                                 smoothing, TFM_REDUCTION_MEAN, scale, &loss);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    lua_pushnumber(L, loss);
    return 1;
}

/* tokenizer_encode(tokenizer, text) -> ids */
static int tfml_tokenizer_encode(lua_State *L)
{
    /* Arguments at fixed indices: scratch memory goes above them. */
    lua_settop(L, 2);
    const tfm_tokenizer *tok = (const tfm_tokenizer *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tokenizer, "tokenizer");
    size_t len;
    const char *text;
    int64_t n = 0;
    int32_t *ids;
    tfm_status st;
    if (lua_type(L, 2) != LUA_TSTRING)
        return luaL_error(L, "text must be a string, got %s",
                          luaL_typename(L, 2));
    text = lua_tolstring(L, 2, &len);
    tfm_clear_error();
    /* Mostly at most one token per byte; when not (SentencePiece: the
     * dummy-prefix space, a byte that becomes three byte tokens), the size
     * the call asks for. */
    ids = (int32_t *)tfml_scratch(L, (len ? len : 1) * sizeof(int32_t));
    st = tfm_tokenizer_encode(tok, text, len, ids, (int64_t)len, &n);
    if (st == TFM_ERR_CAPACITY && n > (int64_t)len) {
        lua_settop(L, 2);
        ids = (int32_t *)tfml_scratch(L, (size_t)n * sizeof(int32_t));
        tfm_clear_error();
        st = tfm_tokenizer_encode(tok, text, len, ids, n, &n);
    }
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    tfml_push_ids(L, ids, n);
    return 1;
}

/* tokenizer_decode(tokenizer, ids) -> text */
static int tfml_tokenizer_decode(lua_State *L)
{
    /* Arguments at fixed indices: scratch memory goes above them. */
    lua_settop(L, 2);
    const tfm_tokenizer *tok = (const tfm_tokenizer *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tokenizer, "tokenizer");
    int64_t batch = 1, n = 0;
    const int32_t *ids = NULL;
    size_t need = 0;
    char *text;
    tfm_status st;
    if (lua_istable(L, 2) && lua_rawlen(L, 2) == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    ids = tfml_read_ids(L, 2, &batch, &n, "ids");
    if (batch != 1)
        return luaL_error(L, "ids must be one sequence (a flat table)");
    tfm_clear_error();
    st = tfm_tokenizer_decode(tok, ids, n, NULL, 0, &need);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY)
        return tfml_raise_status(L, st);
    text = (char *)tfml_scratch(L, need + 1);
    st = tfm_tokenizer_decode(tok, ids, n, text, need + 1, &need);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    lua_pushlstring(L, text, need);
    return 1;
}
/* tokenizer_encode_v2(tokenizer, text, pair or nil, flags) -> ids,
 * type_ids, offsets ({begin, end} byte pairs, 0-based, end exclusive) */
static int tfml_tokenizer_encode_v2(lua_State *L)
{
    lua_settop(L, 4);
    const tfm_tokenizer *tok = (const tfm_tokenizer *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tokenizer, "tokenizer");
    size_t len, pair_len = 0;
    const char *text, *pair = NULL;
    int64_t n = 0;
    tfm_status st;
    if (lua_type(L, 2) != LUA_TSTRING)
        return luaL_error(L, "text must be a string, got %s",
                          luaL_typename(L, 2));
    text = lua_tolstring(L, 2, &len);
    if (!lua_isnil(L, 3)) {
        if (lua_type(L, 3) != LUA_TSTRING)
            return luaL_error(L, "pair must be a string, got %s",
                              luaL_typename(L, 3));
        pair = lua_tolstring(L, 3, &pair_len);
    }
    unsigned flags = (unsigned)luaL_checkinteger(L, 4);
    tfm_clear_error();
    st = tfm_tokenizer_encode_v2(tok, text, len, pair, pair_len, flags, NULL,
                                 NULL, NULL, 0, &n);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY)
        return tfml_raise_status(L, st);
    size_t each = (size_t)(n ? n : 1);
    int32_t *ids = (int32_t *)tfml_scratch(L, each * sizeof(int32_t));
    int32_t *types = (int32_t *)tfml_scratch(L, each * sizeof(int32_t));
    int64_t *offs = (int64_t *)tfml_scratch(L, 2 * each * sizeof(int64_t));
    st = tfm_tokenizer_encode_v2(tok, text, len, pair, pair_len, flags, ids,
                                 types, offs, n, &n);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    tfml_push_ids(L, ids, n);
    tfml_push_ids(L, types, n);
    lua_createtable(L, (int)n, 0);
    for (int64_t i = 0; i < n; i++) {
        lua_createtable(L, 2, 0);
        lua_pushinteger(L, (lua_Integer)offs[2 * i]);
        lua_rawseti(L, -2, 1);
        lua_pushinteger(L, (lua_Integer)offs[2 * i + 1]);
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 3;
}

/* tokenizer_decode_v2(tokenizer, ids, flags) -> bytes */
static int tfml_tokenizer_decode_v2(lua_State *L)
{
    lua_settop(L, 3);
    const tfm_tokenizer *tok = (const tfm_tokenizer *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tokenizer, "tokenizer");
    int64_t batch = 1, n = 0;
    const int32_t *ids = NULL;
    size_t need = 0;
    unsigned flags = (unsigned)luaL_checkinteger(L, 3);
    if (lua_istable(L, 2) && lua_rawlen(L, 2) == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    ids = tfml_read_ids(L, 2, &batch, &n, "ids");
    if (batch != 1)
        return luaL_error(L, "ids must be one sequence (a flat table)");
    tfm_clear_error();
    tfm_status st = tfm_tokenizer_decode_v2(tok, ids, n, flags, NULL, 0, &need);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY)
        return tfml_raise_status(L, st);
    char *text = (char *)tfml_scratch(L, need + 1);
    st = tfm_tokenizer_decode_v2(tok, ids, n, flags, text, need + 1, &need);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    lua_pushlstring(L, text, need);
    return 1;
}

/* tokenizer_id_to_token(tokenizer, id) -> the vocabulary's string */
static int tfml_tokenizer_id_to_token(lua_State *L)
{
    lua_settop(L, 2);
    const tfm_tokenizer *tok = (const tfm_tokenizer *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tokenizer, "tokenizer");
    lua_Integer id = luaL_checkinteger(L, 2);
    size_t need = 0;
    if (id < INT32_MIN || id > INT32_MAX)
        return luaL_error(L, "id %d does not fit int32", (int)id);
    tfm_clear_error();
    tfm_status st = tfm_tokenizer_id_to_token(tok, (int32_t)id, NULL, 0, &need);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY)
        return tfml_raise_status(L, st);
    char *text = (char *)tfml_scratch(L, need + 1);
    st = tfm_tokenizer_id_to_token(tok, (int32_t)id, text, need + 1, &need);
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    lua_pushlstring(L, text, need);
    return 1;
}

/* tokenizer_token_to_id(tokenizer, token) -> id, or nil when absent;
 * tokenizer_special_id(tokenizer, role) -> id, or nil when none */
static int tfml_tokenizer_lookup(lua_State *L, int special)
{
    lua_settop(L, 2);
    const tfm_tokenizer *tok = (const tfm_tokenizer *)tfml_check_handle(
        L, 1, SWIGTYPE_p_tfm_tokenizer, "tokenizer");
    const char *name = tfml_c_string(L, 2, special ? "role" : "token");
    int32_t id = -1;
    tfm_clear_error();
    tfm_status st = special ? tfm_tokenizer_special_id(tok, name, &id)
                            : tfm_tokenizer_token_to_id(tok, name, &id);
    if (st == TFM_ERR_NOT_FOUND) {
        lua_pushnil(L);
        return 1;
    }
    if (st != TFM_OK)
        return tfml_raise_status(L, st);
    lua_pushinteger(L, id);
    return 1;
}
static int tfml_tokenizer_token_to_id(lua_State *L)
{
    return tfml_tokenizer_lookup(L, 0);
}
static int tfml_tokenizer_special_id(lua_State *L)
{
    return tfml_tokenizer_lookup(L, 1);
}
%}

%native(tensor_from_table) int tfml_tensor_from_table(lua_State *L);
%native(tensor_to_table) int tfml_tensor_to_table(lua_State *L);
%native(tensor_to_flat) int tfml_tensor_to_flat(lua_State *L);
%native(tensor_shape) int tfml_tensor_shape(lua_State *L);
%native(close) int tfml_close(lua_State *L);
%native(is_closed) int tfml_is_closed(lua_State *L);
%native(file_kind) int tfml_file_kind(lua_State *L);
%native(model_generate) int tfml_model_generate(lua_State *L);
%native(generator_create) int tfml_generator_create(lua_State *L);
%native(model_generate_batch) int tfml_model_generate_batch(lua_State *L);
%native(generator_next) int tfml_generator_next(lua_State *L);
%native(model_beam_search) int tfml_model_beam_search(lua_State *L);
%native(model_seq2seq_logits) int tfml_model_seq2seq_logits(lua_State *L);
%native(model_seq2seq_backward) int tfml_model_seq2seq_backward(lua_State *L);
%native(cross_entropy) int tfml_cross_entropy(lua_State *L);
%native(model_loss_backward) int tfml_model_loss_backward(lua_State *L);
%native(tokenizer_encode) int tfml_tokenizer_encode(lua_State *L);
%native(tokenizer_decode) int tfml_tokenizer_decode(lua_State *L);
%native(tokenizer_encode_v2) int tfml_tokenizer_encode_v2(lua_State *L);
%native(tokenizer_decode_v2) int tfml_tokenizer_decode_v2(lua_State *L);
%native(tokenizer_id_to_token) int tfml_tokenizer_id_to_token(lua_State *L);
%native(tokenizer_token_to_id) int tfml_tokenizer_token_to_id(lua_State *L);
%native(tokenizer_special_id) int tfml_tokenizer_special_id(lua_State *L);

/* The installed default model, baked in at build time (files.h). */
%constant const char *INSTALLED_MODEL = TFM_LUA_INSTALLED_MODEL;

/* ---- Typemaps -------------------------------------------------------------- */

/* Each call starts with a clean error message (except the calls that read
 * it). */
%exception tfm_last_error %{ $action %}
%exception tfm_clear_error %{ $action %}
%exception tfm_status_string %{ $action %}
%exception {
  tfm_clear_error();
  $action
}

/* Status codes: nothing on success, a Lua error with the message otherwise. */
%typemap(out) tfm_status %{
  if ($1 != TFM_OK) {
    tfml_push_status_error(L, $1);
    SWIG_fail;
  }
%}

/* Objects: only this module's objects (or nil) are accepted, so that a
 * foreign userdata (a file, a light userdata) gives an error, not a crash. */
%typemap(in, checkfn="SWIG_isptrtype") SWIGTYPE *, SWIGTYPE [] %{
  if (!lua_isnil(L, $input) && !tfml_is_swig_object(L, $input)) {
    lua_pushfstring(L, "Error in $symname (arg %d), expected '$1_type' got %s",
                    $argnum, luaL_typename(L, $input));
    SWIG_fail;
  }
  if (!SWIG_IsOK(SWIG_ConvertPtr(L, $input, (void **)&$1, $descriptor, $disown)))
    SWIG_fail_ptr("$symname", $argnum, $descriptor);
%}

/* int and enums are Lua integers. */
%typemap(in, checkfn="lua_isnumber") int %{
  {
    lua_Integer v = tfml_tointeger(L, $input, "argument $argnum of $symname");
    if (v < INT_MIN || v > INT_MAX)
      luaL_error(L, "argument $argnum of $symname: %I is out of range", v);
    $1 = (int)v;
  }
%}
%typemap(out) int %{ lua_pushinteger(L, (lua_Integer)$1); SWIG_arg++; %}
%typemap(out) enum SWIGTYPE %{ lua_pushinteger(L, (lua_Integer)$1); SWIG_arg++; %}

/* Exact 64-bit integers. */
%typemap(in, checkfn="lua_isnumber") int64_t, uint64_t
%{ $1 = ($1_ltype)tfml_tointeger(L, $input, "argument $argnum of $symname"); %}
%typemap(out) int64_t, uint64_t
%{ lua_pushinteger(L, (lua_Integer)$1); SWIG_arg++; %}
%typemap(typecheck) int64_t, uint64_t "$1 = lua_isinteger(L, $input);"

/* tfm_module_get_dropout_state: seed, offset returned. */
%typemap(in, numinputs=0) uint64_t *seed (uint64_t tmp = 0), uint64_t *offset (uint64_t tmp = 0)
%{ $1 = &tmp; %}
%typemap(argout) uint64_t *seed, uint64_t *offset
%{ lua_pushinteger(L, (lua_Integer)tmp$argnum); SWIG_arg++; %}

/* Flags accept booleans. */
%typemap(in) int bias, int scale, int final_norm
%{ $1 = tfml_toflag(L, $input, "argument $argnum of $symname"); %}

/* Created handles are returned, owned by the collector. */
%define TFML_HANDLE_OUT(TYPE)
%typemap(in, numinputs=0) TYPE **out (TYPE *tmp = NULL) %{ $1 = &tmp; %}
%typemap(argout) TYPE **out %{
  SWIG_NewPointerObj(L, tmp$argnum, $descriptor(TYPE *), 1);
  SWIG_arg++;
%}
%enddef
TFML_HANDLE_OUT(tfm_tensor)
TFML_HANDLE_OUT(tfm_module)
TFML_HANDLE_OUT(tfm_tokenizer)
TFML_HANDLE_OUT(tfm_safetensors_writer)
/* An optimizer keeps its module (argument 1) alive and is closed with it
 * (lifetimes.h). */
%typemap(in, numinputs=0) tfm_optimizer **out (tfm_optimizer *tmp = NULL)
%{ $1 = &tmp; %}
%typemap(argout) tfm_optimizer **out %{
  SWIG_NewPointerObj(L, tmp$argnum, $descriptor(tfm_optimizer *), 1);
  tfml_depend(L, -1, 1);
  SWIG_arg++;
%}
/* tfm_module_child: a borrowed part of its parent, not owned by the
 * collector (a finalizer running after the parent's, as when the state
 * closes, must not touch it); transformer/submodules.lua keeps the parent
 * object alive, and close() on it only marks it closed. */
%typemap(in, numinputs=0) tfm_module **child (tfm_module *tmp = NULL)
%{ $1 = &tmp; %}
%typemap(argout) tfm_module **child %{
  SWIG_NewPointerObj(L, tmp$argnum, $descriptor(tfm_module *), 0);
  tfml_depend(L, -1, 1);   /* keeps the parent alive, closed with it */
  SWIG_arg++;
%}

/* A KV cache keeps its model alive, and close(model) closes it first. */
%typemap(in, numinputs=0) tfm_kv_cache **out (tfm_kv_cache *tmp = NULL)
%{ $1 = &tmp; %}
%typemap(argout) tfm_kv_cache **out %{
  SWIG_NewPointerObj(L, tmp$argnum, $descriptor(tfm_kv_cache *), 1);
  tfml_depend(L, -1, 1);
  SWIG_arg++;
%}

/* A file read from memory keeps its data (the Lua string, argument 1)
 * alive. */
%typemap(in, numinputs=0) tfm_safetensors **out (tfm_safetensors *tmp = NULL)
%{ $1 = &tmp; %}
%typemap(argout) tfm_safetensors **out %{
  SWIG_NewPointerObj(L, tmp$argnum, $descriptor(tfm_safetensors *), 1);
  if (lua_type(L, 1) == LUA_TSTRING) {
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
  }
  SWIG_arg++;
%}
%typemap(in, checkfn="lua_isstring") (const void *data, size_t size) {
  size_t len = 0;
  if (lua_type(L, $input) != LUA_TSTRING)
    SWIG_fail_arg("$symname", $argnum, "string");
  $1 = (void *)lua_tolstring(L, $input, &len);
  $2 = len;
}

/* Handles must be open (a closed object or nil is an error). */
%define TFML_HANDLE_CHECK(TYPE, WHAT)
%typemap(check) TYPE *, const TYPE * %{
  if (!$1) {
    lua_pushfstring(L, "%s: argument %d: the " WHAT " is nil or has been closed",
                    "$symname", $argnum);
    SWIG_fail;
  }
%}
%enddef
TFML_HANDLE_CHECK(tfm_tensor, "tensor")
TFML_HANDLE_CHECK(tfm_module, "module")
TFML_HANDLE_CHECK(tfm_tokenizer, "tokenizer")
TFML_HANDLE_CHECK(tfm_kv_cache, "KV cache")
TFML_HANDLE_CHECK(tfm_generator, "generator")
TFML_HANDLE_CHECK(tfm_safetensors, "safetensors file")
TFML_HANDLE_CHECK(tfm_safetensors_writer, "safetensors writer")
TFML_HANDLE_CHECK(tfm_optimizer, "optimizer")
TFML_HANDLE_CHECK(tfm_rng, "random generator")
/* ...except the optional attention-weights output. */
%typemap(check) tfm_tensor *weights ""
%typemap(check) const tfm_tensor *static_k, const tfm_tensor *static_v ""

/* Shapes as tables. */
%typemap(in, checkfn="lua_istable") (int rank, const int64_t *shape)
    (int64_t tmp[TFM_MAX_RANK]) %{
  $1 = tfml_read_shape(L, $input, tmp, TFM_MAX_RANK);
  $2 = tmp;
%}
%typemap(in, numinputs=0) (int *rank, int64_t *shape)
    (int rank_tmp = 0, int64_t shape_tmp[TFM_SAFETENSORS_MAX_RANK])
%{ $1 = &rank_tmp; $2 = shape_tmp; %}
%typemap(argout) (int *rank, int64_t *shape)
%{ tfml_push_shape(L, rank_tmp$argnum, shape_tmp$argnum); SWIG_arg++; %}

/* Scalar outputs. */
%typemap(in, numinputs=0) int64_t *macs (int64_t tmp = 0) %{ $1 = &tmp; %}
%typemap(argout) int64_t *macs
%{ lua_pushinteger(L, (lua_Integer)tmp$argnum); SWIG_arg++; %}
%typemap(in, numinputs=0) int32_t *id (int32_t tmp = 0) %{ $1 = &tmp; %}
%typemap(argout) int32_t *id %{ lua_pushinteger(L, tmp$argnum); SWIG_arg++; %}
%typemap(in, numinputs=0) tfm_dtype *dtype (tfm_dtype tmp = TFM_DTYPE_F32)
%{ $1 = &tmp; %}
%typemap(argout) tfm_dtype *dtype
%{ lua_pushinteger(L, (lua_Integer)tmp$argnum); SWIG_arg++; %}

/* Token ids: nested {{...}, ...} -> [batch][seq]; flat {...} -> batch 1. */
%typemap(in, checkfn="lua_istable") (const int32_t *ids, int64_t batch,
                                     int64_t seq) %{
  $1 = tfml_read_ids(L, $input, &$2, &$3, "ids");
%}
%typemap(in, checkfn="lua_istable") (const int32_t *ids, int64_t n) {
  int64_t b = 0;
  $1 = tfml_read_ids(L, $input, &b, &$2, "ids");
  if (b != 1)
    luaL_error(L, "ids must be one sequence (a flat table)");
}

/* Logits for sampling: a flat table of numbers. */
%typemap(in, checkfn="lua_istable") (const float *logits, int64_t vocab_size) {
  int64_t i, n = (int64_t)lua_rawlen(L, $input);
  float *buf = (float *)tfml_scratch(L, (size_t)(n ? n : 1) * sizeof(float));
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, $input, i + 1);
    buf[i] = (float)tfml_tonumber(L, -1, "a logit");
    lua_pop(L, 1);
  }
  $1 = buf;
  $2 = n;
}

/* Extra metadata for tfm_model_save: a table {key = value, ...}. */
%typemap(in) (int n_extra, const char *const *keys,
              const char *const *values) {
  int n = 0;
  if (!lua_isnoneornil(L, $input)) {
    const char **k, **v;
    if (!lua_istable(L, $input))
      luaL_error(L, "metadata must be a table of strings, got %s",
                 luaL_typename(L, $input));
    lua_pushnil(L);
    while (lua_next(L, $input)) { n++; lua_pop(L, 1); }
    k = (const char **)tfml_scratch(L, (size_t)(n ? n : 1) * sizeof *k);
    v = (const char **)tfml_scratch(L, (size_t)(n ? n : 1) * sizeof *v);
    n = 0;
    lua_pushnil(L);
    while (lua_next(L, $input)) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "metadata keys and values must be strings");
      k[n] = tfml_c_string(L, -2, "metadata key");   /* owned by the table */
      v[n] = tfml_c_string(L, -1, "metadata value");
      n++;
      lua_pop(L, 1);
    }
    $2 = ($2_ltype)k;
    $3 = ($3_ltype)v;
  } else {
    $2 = NULL;
    $3 = NULL;
  }
  $1 = n;
}

/* Value structs as tables. */
%typemap(in, checkfn="lua_istable") const tfm_layer_config *
    (tfm_layer_config tmp) %{
  tfml_read_layer_config(L, $input, &tmp, "layer configuration");
  $1 = &tmp;
%}
%typemap(out) tfm_layer_config %{ tfml_push_layer_config(L, &$1); SWIG_arg++; %}

%typemap(in, checkfn="lua_istable") const tfm_model_config *,
                                     const tfm_model_config *config
    (tfm_model_config tmp) %{
  tfml_read_model_config(L, $input, &tmp);
  $1 = &tmp;
%}
%typemap(in, numinputs=0) tfm_model_config *config (tfm_model_config tmp)
%{ memset(&tmp, 0, sizeof tmp); $1 = &tmp; %}
%typemap(argout) tfm_model_config *config
%{ tfml_push_model_config(L, &tmp$argnum); SWIG_arg++; %}
%typemap(argout) const tfm_model_config *, const tfm_model_config *config ""

%typemap(in) const tfm_sampling * (tfm_sampling tmp) %{
  if (lua_isnoneornil(L, $input)) {
    $1 = NULL;
  } else {
    tfml_read_sampling(L, $input, &tmp);
    $1 = &tmp;
  }
%}
%typemap(out) tfm_sampling %{ tfml_push_sampling(L, &$1); SWIG_arg++; %}

/* Attention variants (variants.h) and model options: tables, nil meaning
 * the defaults.  Outputs (init, get_config, get_options) are returned. */
%typemap(in) const tfm_attention_config * (tfm_attention_config tmp) %{
  if (lua_isnoneornil(L, $input)) {
    $1 = NULL;
  } else {
    tfml_read_attention_config(L, $input, &tmp, "attention configuration");
    $1 = &tmp;
  }
%}
%typemap(in, numinputs=0) tfm_attention_config *config
    (tfm_attention_config tmp) %{
  memset(&tmp, 0, sizeof tmp);
  tmp.struct_size = sizeof tmp;
  $1 = &tmp;
%}
%typemap(argout) tfm_attention_config *config
%{ tfml_push_attention_config(L, &tmp$argnum); SWIG_arg++; %}
%typemap(argout) const tfm_attention_config *,
                 const tfm_attention_config *config ""

/* Multi-head attention options (attention.h): a table, nil meaning the
 * defaults. */
%typemap(in) const tfm_mha_options *
    (tfm_mha_options tmp, tfm_attention_config atmp) %{
  if (lua_isnoneornil(L, $input)) {
    $1 = NULL;
  } else {
    tfml_read_mha_options(L, $input, &tmp, &atmp);
    $1 = &tmp;
  }
%}

/* Layer options (layers.h): a table, nil meaning the defaults. */
%typemap(in) const tfm_layer_options *
    (tfm_layer_options tmp, tfm_attention_config atmp) %{
  if (lua_isnoneornil(L, $input)) {
    $1 = NULL;
  } else {
    tfml_read_layer_options(L, $input, &tmp, &atmp);
    $1 = &tmp;
  }
%}

%typemap(in) const tfm_model_options * (tfm_model_options tmp) %{
  if (lua_isnoneornil(L, $input)) {
    $1 = NULL;
  } else {
    tfml_read_model_options(L, $input, &tmp);
    $1 = &tmp;
  }
%}
%typemap(in, numinputs=0) tfm_model_options *options
    (tfm_model_options tmp) %{
  memset(&tmp, 0, sizeof tmp);
  tmp.struct_size = sizeof tmp;
  $1 = &tmp;
%}
%typemap(argout) tfm_model_options *options
%{ tfml_push_model_options(L, &tmp$argnum); SWIG_arg++; %}
%typemap(argout) const tfm_model_options *,
                 const tfm_model_options *options ""

/* Layout of tfm_sinusoidal_encoding_ex: "interleaved", "concat" or the
 * constant. */
%typemap(in) tfm_sinusoidal_layout layout %{
  $1 = (tfm_sinusoidal_layout)tfml_toenum(L, $input, TFM_ENUM_SINUSOIDAL_LAYOUT,
                                          "layout");
%}

%typemap(in) const tfm_attention_masks * (tfm_attention_masks tmp) %{
  if (lua_isnoneornil(L, $input)) {
    $1 = NULL;
  } else {
    tfml_read_masks(L, $input, &tmp);
    $1 = &tmp;
  }
%}

/* ---- What is not exposed ------------------------------------------------- */
/* The collector and close() free handles. */
%ignore tfm_model_loss_backward;   /* core.model_loss_backward */
%ignore tfm_tensor_free;
%ignore tfm_module_free;
%ignore tfm_tokenizer_free;
%ignore tfm_kv_cache_free;
%ignore tfm_generator_free;
%ignore tfm_safetensors_close;
%ignore tfm_safetensors_writer_free;
/* Raw memory: tables cross the boundary through the tensor natives. */
%ignore tfm_tensor_wrap;
%ignore tfm_tensor_create_copy;
%ignore tfm_tensor_data;
%ignore tfm_tensor_data_const;
%ignore tfm_module_grad;           /* float ** zero copy: the bindings copy (get_grad) */
%ignore tfm_module_parameter_data;
/* Replaced by natives of the same purpose. */
%ignore tfm_tokenizer_encode;
%ignore tfm_tokenizer_decode;
%ignore tfm_tokenizer_encode_v2;
%ignore tfm_tokenizer_decode_v2;
%ignore tfm_tokenizer_id_to_token;
%ignore tfm_tokenizer_token_to_id;
%ignore tfm_tokenizer_special_id;
%ignore tfm_model_generate;
%ignore tfm_model_generate_v2;
%ignore tfm_model_generate_batch;
%ignore tfm_generator_create;
%ignore tfm_generator_next;
%ignore tfm_generate_options;
%ignore tfm_generate_options_init;
%ignore tfm_model_seq2seq_logits;
%ignore tfm_model_logits_v2;
%ignore tfm_model_inputs;
%ignore tfm_model_inputs_init;
%ignore tfm_model_seq2seq_backward;
%ignore tfm_optimizer_free;
%ignore tfm_cross_entropy;
%ignore tfm_causal_lm_loss;
%ignore tfm_masked_lm_inputs;
%ignore tfm_model_beam_search;
%ignore tfm_beam_search_options;
%ignore tfm_beam_search_options_init;
/* Value structs travel as tables. */
%ignore tfm_attention_masks;
%ignore tfm_layer_config;
%ignore tfm_model_config;
%ignore tfm_sampling;
%ignore tfm_attention_config;
%ignore tfm_model_options;
%ignore tfm_layer_options;
%ignore tfm_layer_options_init;
%ignore tfm_mha_options;
%ignore tfm_mha_options_init;
/* tfm_enum_from_name: option strings are accepted wherever an enum is. */
%ignore tfm_enum_from_name;
/* Compile-time helpers. */
%ignore TFM_AT_LEAST_VERSION;

/* ---- The public headers ---------------------------------------------------- */
/* Strings in: no NUL inside (tfml_c_string). */
%typemap(in, checkfn="lua_isstring") const char * %{
  $1 = (char *)tfml_c_string(L, $input, "argument $argnum of $symname");
%}

%include <transformer/version.h>
%include <transformer/status.h>
%include <transformer/tensor.h>
%include <transformer/module.h>
%include <transformer/attention.h>
%include <transformer/layers.h>
%include <transformer/embedding.h>
%include <transformer/safetensors.h>
%include <transformer/model.h>
%include <transformer/tokenizer.h>
%include <transformer/names.h>
%include "weights.i"   /* weights.h */

/* ---- Training (training.h) ------------------------------------------------
 * Optimizers over a module (kept alive by the optimizer), their options
 * struct, and the two schedule factors; the losses go through the
 * cross_entropy native above. */
%typemap(in, numinputs=0) double *factor (double tmp = 0.0) %{ $1 = &tmp; %}
%typemap(argout) double *factor %{ lua_pushnumber(L, tmp$argnum); SWIG_arg++; %}
%include <transformer/training.h>
