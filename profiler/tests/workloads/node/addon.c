// A native addon calling back into JavaScript: `callMany(fn, n)` calls `fn()` n times from C,
// through N-API (whose symbols node itself exports: nothing to link). Built by the tests with
// `gcc -shared -fPIC -I<node's include/node>`.
#include <node_api.h>
#include <stdint.h>

// Not inlined into its caller, so that it keeps a frame (and its name) of its own.
__attribute__((noinline)) static napi_value call_many(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_value result = NULL;
  int64_t n = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int64(env, argv[1], &n) != napi_ok) {
    napi_throw_type_error(env, NULL, "callMany(fn, n)");
    return NULL;
  }
  napi_value global;
  napi_get_global(env, &global);
  for (int64_t i = 0; i < n; i++) {
    // A scope per call, so that n results do not pile up as handles.
    napi_handle_scope scope;
    napi_open_handle_scope(env, &scope);
    napi_status status = napi_call_function(env, global, argv[0], 0, NULL, &result);
    napi_close_handle_scope(env, scope);
    if (status != napi_ok) {
      return NULL;
    }
  }
  napi_get_undefined(env, &result);
  return result;
}

NAPI_MODULE_INIT() {
  napi_value function;
  napi_create_function(env, "callMany", NAPI_AUTO_LENGTH, call_many, NULL, &function);
  napi_set_named_property(env, exports, "callMany", function);
  return exports;
}
