//! The sampled thread's thread pointer, from which runtimes find their thread state: CPython
//! compares it with each thread state's `thread_id` (glibc's `pthread_self()` is the thread
//! pointer); a runtime keeping its state in a thread-local variable of the executable's static TLS
//! block finds it at a fixed offset from it.
use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};

use super::fields::read_u64;
use crate::setting;

/// Byte offset of `thread.fsbase` in the kernel's `struct task_struct` (from its BTF).
#[unsafe(no_mangle)]
static TASK_FSBASE_OFFSET: u32 = 0;

/// The current task's FS base (x86-64's thread pointer), as the kernel saved it.
pub fn thread_pointer() -> Option<u64> {
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let at = unsafe { task.add(setting(&TASK_FSBASE_OFFSET) as usize) }.cast::<u64>();
    unsafe { bpf_probe_read_kernel(at) }.ok()
}

/// The word at `offset` from the current thread's thread pointer: a thread-local variable of the
/// executable's static TLS block (Go's current `g`).
pub fn thread_local(offset: i64) -> Option<u64> {
    read_u64(thread_pointer()?.wrapping_add_signed(offset))
}
