"""What the workloads use that CPython 3.6 and 3.7 lack: the calling thread's kernel id
(`threading.get_native_id`, 3.8+) and a code object with some fields changed (`replace`, 3.8+)."""
import threading
import types

SYS_GETTID = 186  # x86-64


def native_id():
    """The calling thread's id in the kernel (its TID)."""
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    import ctypes

    return ctypes.CDLL(None).syscall(SYS_GETTID)


# The arguments of 3.6's and 3.7's `types.CodeType`, in order.
CODE_FIELDS = (
    "co_argcount co_kwonlyargcount co_nlocals co_stacksize co_flags co_code co_consts co_names "
    "co_varnames co_filename co_name co_firstlineno co_lnotab co_freevars co_cellvars"
).split()


def replace_code(code, **changes):
    """`code` with the fields of `changes` (`co_name=...`) changed."""
    if hasattr(code, "replace"):
        return code.replace(**changes)
    return types.CodeType(*(changes.get(field, getattr(code, field)) for field in CODE_FIELDS))
