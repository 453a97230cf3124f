//! Fields of a runtime's structures, read from the copies walkers make of them, and words of
//! target memory: every offset comes from userspace, and every value from the target.
use core::mem::size_of;

use profiler_common::runtimes::RuntimeWalk;

use crate::memory::read_user;

/// The 8 bytes at `offset` of `bytes` (`None` outside it, or for a field the version lacks).
pub fn field<const N: usize>(bytes: &[u8; N], offset: u32) -> Option<u64> {
    let at = bounded(offset, N - size_of::<u64>())?;
    Some(unsafe { bytes.as_ptr().add(at).cast::<u64>().read_unaligned() })
}

pub fn field_i32<const N: usize>(bytes: &[u8; N], offset: u32) -> Option<i32> {
    let at = bounded(offset, N - size_of::<i32>())?;
    Some(unsafe { bytes.as_ptr().add(at).cast::<i32>().read_unaligned() })
}

pub fn byte<const N: usize>(bytes: &[u8; N], offset: u32) -> Option<u8> {
    let at = bounded(offset, N - 1)?;
    Some(unsafe { *bytes.as_ptr().add(at) })
}

/// `offset` if it is at most `max`. Offsets come from memory the verifier does not track (a map,
/// a count kept in a map): the compiler would compute the pointers they lead to before the check
/// (once, before the loops), where the verifier sees an unbounded pointer; the barrier keeps the
/// check between the value and its use.
pub fn bounded(offset: u32, max: usize) -> Option<usize> {
    let at = core::hint::black_box(offset as usize);
    (at <= max).then_some(at)
}

/// The word at `addr` of the current task's memory.
pub fn read_u64(addr: u64) -> Option<u64> {
    let mut value = 0u64;
    unsafe { read_user((&raw mut value).cast(), size_of::<u64>(), addr) }.ok()?;
    Some(value)
}

/// The outcome a step of a `bpf_loop` left as a `u32` (what its context holds).
pub fn walk_of(outcome: u32) -> Option<RuntimeWalk> {
    u16::try_from(outcome).ok().and_then(RuntimeWalk::from_u16)
}
