/* An extension module of CPython, built once and copied under many names
 * (`ext_N.cpython-3XY-x86_64-linux-gnu.so`): each copy is a file of its own, mapped by the
 * interpreter that imports it, as a service importing hundreds of extension modules maps them.
 * It defines the init functions of `ext_0` to `ext_399`, so that any copy imports under any of
 * those names. */
#include <Python.h>

#define MODULE(n)                                                                          \
    static struct PyModuleDef module_##n = {PyModuleDef_HEAD_INIT, "ext_" #n, NULL, -1, NULL}; \
    PyMODINIT_FUNC PyInit_ext_##n(void) { return PyModule_Create(&module_##n); }
#define TEN(n) MODULE(n##0) MODULE(n##1) MODULE(n##2) MODULE(n##3) MODULE(n##4) \
    MODULE(n##5) MODULE(n##6) MODULE(n##7) MODULE(n##8) MODULE(n##9)
#define HUNDRED(n) TEN(n##0) TEN(n##1) TEN(n##2) TEN(n##3) TEN(n##4) \
    TEN(n##5) TEN(n##6) TEN(n##7) TEN(n##8) TEN(n##9)

MODULE(0) MODULE(1) MODULE(2) MODULE(3) MODULE(4) MODULE(5) MODULE(6) MODULE(7) MODULE(8) MODULE(9)
TEN(1) TEN(2) TEN(3) TEN(4) TEN(5) TEN(6) TEN(7) TEN(8) TEN(9)
HUNDRED(1) HUNDRED(2) HUNDRED(3)
