/* Lifetimes of the Lua core's objects (included into transformer.i's
 * helper block, after tfml_is_swig_object: it uses SWIG's userdata).
 *
 * An object whose C handle refers to another handle (its owner) is its
 * dependent:
 *   optimizer      -> its module          (tfm_optimizer_create)
 *   KV cache       -> its model           (tfm_kv_cache_create[_rolling])
 *   generator      -> its model, the tokenizer of its stop strings and the
 *                     cache it reuses     (tfm_generator_create)
 *   child module   -> its parent          (tfm_module_child; borrowed)
 * The registry's table TFML_DEPS_KEY maps each dependent to the list of its
 * owners.  Its keys are weak and its values strong (an ephemeron table): a
 * dependent keeps its owners alive, so the collector never frees an owner
 * under a living dependent, and close(owner) first closes every dependent
 * of it (and theirs, recursively), whose later use then raises "... has
 * been closed" instead of reading freed memory.
 *
 * Finalizers: when an owner and its dependents are collected together (or
 * at lua_close, where every object is finalized), the order is not
 * guaranteed; any order is safe because the C library keeps an owner
 * freed before its dependents allocated until the last of them is freed
 * (src/base/lifetime.h: a dependent's free releases its owner's count),
 * and a child is borrowed (its finalizer frees nothing). */

#define TFML_DEPS_KEY "transformer.core.dependents"

/* Pushes the registry's dependents table (made on first use). */
static void tfml_push_deps(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, TFML_DEPS_KEY) == LUA_TTABLE)
        return;
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushstring(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, TFML_DEPS_KEY);
}

/* Records that the object at dep_idx refers to the one at owner_idx (which
 * it keeps alive, and is closed with).  Nil owners are skipped. */
static void tfml_depend(lua_State *L, int dep_idx, int owner_idx)
{
    dep_idx = lua_absindex(L, dep_idx);
    owner_idx = lua_absindex(L, owner_idx);
    if (lua_isnil(L, owner_idx))
        return;
    luaL_checkstack(L, 4, "dependents");
    tfml_push_deps(L);
    lua_pushvalue(L, dep_idx);
    if (lua_rawget(L, -2) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, dep_idx);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    lua_pushvalue(L, owner_idx);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    lua_pop(L, 2);
}

/* Frees what the object at idx owns (through its class destructor; a
 * borrowed child frees nothing) and marks it closed. */
static void tfml_close_object(lua_State *L, int idx)
{
    swig_lua_userdata *usr = (swig_lua_userdata *)lua_touserdata(L, idx);
    if (usr->ptr && usr->own) {
        swig_lua_class *clss = (swig_lua_class *)usr->type->clientdata;
        void *p = usr->ptr;
        usr->ptr = NULL;
        usr->own = 0;
        if (clss && clss->destructor)
            clss->destructor(p);
    }
    usr->ptr = NULL;
    usr->own = 0;
}

/* Closes every dependent of the object at idx (theirs first), then the
 * object itself.  The chains are short (child -> optimizer; model -> cache
 * -> generator); a dependent is never its own owner. */
static void tfml_close_tree(lua_State *L, int idx)
{
    int deps;
    idx = lua_absindex(L, idx);
    luaL_checkstack(L, 6, "dependents");
    tfml_push_deps(L);
    deps = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, deps)) {
        lua_Integer i, n = (lua_Integer)lua_rawlen(L, -1);
        int is_dep = 0;
        for (i = 1; i <= n && !is_dep; i++) {
            lua_rawgeti(L, -1, i);
            is_dep = lua_rawequal(L, -1, idx);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);                    /* the owners: the key stays */
        if (is_dep)
            tfml_close_tree(L, lua_gettop(L));
    }
    lua_pop(L, 1);
    tfml_close_object(L, idx);
}

/* Is the object at idx a borrowed child module (a module that depends on
 * another)? */
static int tfml_is_child(lua_State *L, int idx)
{
    swig_lua_userdata *usr = (swig_lua_userdata *)lua_touserdata(L, idx);
    int is;
    if (usr->type != SWIGTYPE_p_tfm_module)
        return 0;
    idx = lua_absindex(L, idx);
    tfml_push_deps(L);
    lua_pushvalue(L, idx);
    is = lua_rawget(L, -2) == LUA_TTABLE;
    lua_pop(L, 2);
    return is;
}

/* close(obj): frees the object's handle now, after closing every object
 * that refers to it (a model's KV caches, optimizers, generators and
 * children).  A borrowed child is only marked closed (what refers to it
 * stays usable while its parent is open).  Idempotent; nil is a no-op. */
static int tfml_close(lua_State *L)
{
    if (lua_isnoneornil(L, 1))
        return 0;
    if (!tfml_is_swig_object(L, 1))
        return luaL_error(L, "close: expected a transformer object, got %s",
                          luaL_typename(L, 1));
    if (tfml_is_child(L, 1))
        tfml_close_object(L, 1);
    else
        tfml_close_tree(L, 1);
    return 0;
}

/* is_closed(obj) -> boolean */
static int tfml_is_closed(lua_State *L)
{
    swig_lua_userdata *usr;
    if (!tfml_is_swig_object(L, 1))
        return luaL_error(L, "is_closed: expected a transformer object, "
                          "got %s", luaL_typename(L, 1));
    usr = (swig_lua_userdata *)lua_touserdata(L, 1);
    lua_pushboolean(L, usr->ptr == NULL);
    return 1;
}
