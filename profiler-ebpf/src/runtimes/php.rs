//! PHP frames, read at sample time: the Zend Engine keeps them (`zend_execute_data`) on a VM
//! stack of its own, reused by the next call.
//!
//! A build without thread safety (every Debian PHP) has one `executor_globals` per process, and
//! runs PHP on its main thread only: from its `current_execute_data` (userspace says where, in
//! `RUNTIME_PROCESSES`), each frame's caller is its `prev_execute_data`. Each becomes a
//! [`PhpFrame`]: the function it runs, the op it was at, its call info, and whether it ends a run
//! of the VM. Every read goes through `bpf_probe_read_user`; the walk is bounded.
use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, generated::bpf_loop},
    macros::map,
    maps::PerCpuArray,
};
use profiler_common::runtimes::{
    ProcessRecord, RuntimeProcess, RuntimeWalk,
    php::{MAX_PHP_FRAMES, PhpFrame, PhpProcess, php_frame_flags},
};

use super::fields::{bounded, field, read_u64, walk_of};
use crate::memory::read_user;

/// What a CPU keeps of a walk out of the verifier's sight (see the Ruby walker's).
#[repr(C)]
pub struct Reads {
    written: u32,
}

#[map(name = "PHP_READS")]
static PHP_READS: PerCpuArray<Reads> = PerCpuArray::with_max_entries(1, 0);

/// Bytes read of a frame: up to its `prev_execute_data`.
const FRAME_BYTES: usize = 56;

/// Walks the PHP frames of the current thread of `process` into `frames` (room for
/// [`MAX_PHP_FRAMES`]); returns the outcome and the bytes of records written.
pub fn walk(process: &RuntimeProcess, tid: u32, frames: *mut u8) -> (RuntimeWalk, u32) {
    let (Some(process), Some(reads)) = (PhpProcess::of_runtime(process), PHP_READS.get_ptr_mut(0)) else {
        return (RuntimeWalk::ReadError, 0);
    };
    // The engine's frames are its main thread's.
    if (bpf_get_current_pid_tgid() >> 32) as u32 != tid {
        return (RuntimeWalk::NotItsThread, 0);
    }
    let reads = unsafe { &mut *reads };
    set_written(reads, 0);
    let Some(first) = read_u64(process.current_execute_data) else { return (RuntimeWalk::ReadError, 0) };
    let mut walk = Walk { reads, frames, frame: first, outcome: RuntimeWalk::Truncated as u32 };
    let step: unsafe extern "C" fn(u64, *mut c_void) -> i64 = step;
    unsafe { bpf_loop(MAX_PHP_FRAMES as u32 + 1, step as *mut c_void, (&raw mut walk).cast(), 0) };
    let outcome = walk_of(walk.outcome).unwrap_or(RuntimeWalk::ReadError);
    let len = written(walk.reads).min(MAX_PHP_FRAMES as u32);
    (outcome, len * size_of::<PhpFrame>() as u32)
}

/// The state of a walk, between its steps.
struct Walk<'a> {
    reads: &'a mut Reads,
    frames: *mut u8,
    /// The next frame to read (0: none).
    frame: u64,
    outcome: u32,
}

/// `bpf_loop`'s callback: one frame of the walk in `walk`. Returns 1 to stop.
unsafe extern "C" fn step(_index: u64, walk: *mut c_void) -> i64 {
    let walk = unsafe { &mut *walk.cast::<Walk>() };
    match read_frame(walk) {
        Ok(()) => 0,
        Err(outcome) => {
            walk.outcome = outcome as u32;
            1
        }
    }
}

/// Reads the next frame of `walk` and writes its record; `Err` ends the walk with that outcome.
fn read_frame(walk: &mut Walk) -> Result<(), RuntimeWalk> {
    if walk.frame == 0 {
        return Err(RuntimeWalk::Complete);
    }
    let mut frame = [0u8; FRAME_BYTES];
    unsafe { read_user(frame.as_mut_ptr(), frame.len(), walk.frame) }.map_err(|_| RuntimeWalk::ReadError)?;
    let func = field(&frame, PhpProcess::FRAME_FUNC).ok_or(RuntimeWalk::ReadError)?;
    let opline = field(&frame, PhpProcess::FRAME_OPLINE).ok_or(RuntimeWalk::ReadError)?;
    let call_info =
        (field(&frame, PhpProcess::FRAME_CALL_INFO).ok_or(RuntimeWalk::ReadError)? as u32) & 0xffff_0000;
    walk.frame = field(&frame, PhpProcess::FRAME_PREV).ok_or(RuntimeWalk::ReadError)?;
    let mut kind = [0u8; 1];
    unsafe { read_user(kind.as_mut_ptr(), 1, func) }.map_err(|_| RuntimeWalk::ReadError)?;
    let mut flags = 0;
    if kind[0] == PhpProcess::INTERNAL_FUNCTION {
        flags |= php_frame_flags::INTERNAL;
    } else if call_info & PhpProcess::CALL_TOP != 0 {
        flags |= php_frame_flags::RUN_END;
    }
    let at = bounded(written(walk.reads), MAX_PHP_FRAMES - 1).ok_or(RuntimeWalk::Truncated)?;
    let record = PhpFrame { func, opline, call_info, flags };
    unsafe { walk.frames.add(at * size_of::<PhpFrame>()).cast::<PhpFrame>().write_unaligned(record) };
    set_written(walk.reads, at as u32 + 1);
    Ok(())
}

fn written(reads: &Reads) -> u32 {
    unsafe { core::ptr::read_volatile(&reads.written) }
}

fn set_written(reads: &mut Reads, count: u32) {
    unsafe { core::ptr::write_volatile(&mut reads.written, count) }
}
