/* A program with CPython linked in (libpython), called as nothing like python, as servers that
 * embed the interpreter are (uWSGI, a C program calling Py_Initialize): it runs the script
 * SCRIPT (the first argument) with the arguments that follow as `sys.argv`, through `runpy`, its
 * directory first in `sys.path` as python puts it.
 *
 * usage: host SCRIPT ARG... */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    Py_Initialize();
    PyObject *args = PyList_New(0);
    for (int i = 1; i < argc; i++) {
        PyObject *arg = PyUnicode_DecodeFSDefault(argv[i]);
        PyList_Append(args, arg);
        Py_DECREF(arg);
    }
    PySys_SetObject("argv", args);
    Py_DECREF(args);
    int failed = PyRun_SimpleString(
        "import os, runpy, sys\n"
        "sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n");
    return Py_FinalizeEx() < 0 || failed ? 1 : 0;
}
