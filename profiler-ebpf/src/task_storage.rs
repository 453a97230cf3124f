//! Task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`): a value kept on a thread's `task_struct`,
//! found from it without hashing and freed with it. aya-ebpf defines BTF maps of this kind for
//! inodes, sockets and cgroups, not for tasks; this is the same definition for tasks (the kernel
//! takes a local storage's key and value types from BTF, which a legacy map definition lacks).
use core::{ffi::c_void, ptr};

use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE},
    helpers::generated::bpf_task_storage_get,
};

/// The map's definition as the loader reads it from BTF (libbpf's `__uint`/`__type` layout):
/// the fields are never read or written here.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders the loader reads; the kernel owns the storage.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T: Copy> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: ptr::null(),
            key: ptr::null(),
            value: ptr::null(),
            max_entries: ptr::null(),
            map_flags: ptr::null(),
        }
    }

    /// The value kept on `task` (a task pointer the verifier knows), to read and write in
    /// place, if any.
    pub fn get_ptr_mut(&self, task: *mut c_void) -> Option<*mut T> {
        let value = unsafe { bpf_task_storage_get(self.as_ptr(), task.cast(), ptr::null_mut(), 0) };
        (!value.is_null()).then_some(value.cast())
    }

    /// The value kept on `task`, made a copy of `initial` if it had none; `None` when the
    /// kernel has no room.
    pub fn get_or_insert(&self, task: *mut c_void, initial: &mut T) -> Option<*mut T> {
        let flags = u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE);
        let value =
            unsafe { bpf_task_storage_get(self.as_ptr(), task.cast(), ptr::from_mut(initial).cast(), flags) };
        (!value.is_null()).then_some(value.cast())
    }

    fn as_ptr(&self) -> *mut c_void {
        ptr::from_ref(self).cast_mut().cast()
    }
}
