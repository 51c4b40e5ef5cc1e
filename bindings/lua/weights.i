/* Included by transformer.i after the public headers it builds on
 * (module.h, safetensors.h): weights kept in 16, 8 and 4 bits
 * (transformer/weights.h).
 *
 *   core.tfm_module_quantize(module, dtype)        dtype: core.TFM_DTYPE_*
 *   core.tfm_module_parameter_dtype(module, name)  -> core.TFM_DTYPE_*
 *   core.tfm_module_parameter_bytes(module)        -> bytes
 *   core.tfm_model_load_v2(path [, options])       -> a model object;
 *       options: nil (the defaults) or a table {dtype = core.TFM_DTYPE_*
 *       or core.TFM_LOAD_DTYPE_AUTO, mmap = boolean}, missing fields at
 *       their defaults (tfm_load_options_init)
 *
 * The pure-Lua layer (transformer/model.lua, module.lua) takes names. */

%typemap(in) const tfm_load_options *options (tfm_load_options tmp) %{
  tfm_load_options_init(&tmp);
  $1 = &tmp;
  if (!lua_isnoneornil(L, $input)) {
    if (!lua_istable(L, $input))
      luaL_error(L, "$symname: options must be a table or nil, not %s",
                 luaL_typename(L, $input));
    if (tfml_field(L, $input, "dtype")) {
      tmp.dtype = (int)tfml_tointeger(L, -1, "options.dtype");
      lua_pop(L, 1);
    }
    if (tfml_field(L, $input, "mmap")) {
      tmp.mmap = lua_isboolean(L, -1)
                     ? lua_toboolean(L, -1)
                     : (int)tfml_tointeger(L, -1, "options.mmap");
      lua_pop(L, 1);
    }
  }
%}
%typemap(default) const tfm_load_options *options %{ $1 = NULL; %}
/* The struct is the table above. */
%ignore tfm_load_options;
%ignore tfm_load_options_init;

%include <transformer/weights.h>
