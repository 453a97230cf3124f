//! Reads of the sampled thread's user memory.
use aya_ebpf::helpers::generated::bpf_probe_read_user;

/// Copies `len` bytes at `src` of the current task's user memory to `dst`; fails as a whole when
/// any page of the range cannot be read.
pub unsafe fn read_user(dst: *mut u8, len: usize, src: u64) -> Result<(), i64> {
    let ret = unsafe { bpf_probe_read_user(dst.cast(), len as u32, src as *const _) };
    if ret < 0 { Err(ret) } else { Ok(()) }
}
