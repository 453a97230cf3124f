//! Ruby frames, read at sample time: CRuby keeps them as control frames on a VM stack of each
//! thread's own, rewritten by every call.
//!
//! The thread's execution context is its `ruby_current_ec`, a thread-local variable of libruby's
//! static TLS block (userspace says where, per process, in `RUNTIME_PROCESSES`): it is set on
//! every thread Ruby made, holding the GVL or not, and on no other. Its `cfp` is the innermost
//! control frame; callers follow, one record higher each, up to the dummy frame the thread
//! started with. Each becomes a [`RubyFrame`]: the instruction sequence and program counter of a
//! Ruby frame, the method entry that names a C frame (and a Ruby frame's class), and whether the
//! frame ends a run of the VM. Every read goes through `bpf_probe_read_user`, every walk is
//! bounded: a target with a garbage context costs failed reads, never more.
use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{helpers::generated::bpf_loop, macros::map, maps::PerCpuArray};
use profiler_common::runtimes::{
    ProcessRecord, RuntimeProcess, RuntimeWalk,
    ruby::{MAX_RUBY_FRAMES, RubyFrame, RubyProcess, ruby_frame_flags, thread_states},
};

use super::{
    fields::{bounded, field, read_u64, walk_of},
    thread::thread_local,
};
use crate::memory::read_user;

/// What a CPU keeps of a walk out of the verifier's sight: counted in a register, the frames
/// written would make each step of the walk a state of its own for each possible count.
#[repr(C)]
pub struct Reads {
    written: u32,
}

#[map(name = "RUBY_READS")]
static RUBY_READS: PerCpuArray<Reads> = PerCpuArray::with_max_entries(1, 0);

/// Bytes read of a control frame: up to its `ep` (the same in every release).
const CONTROL_FRAME_BYTES: usize = 40;
const CFP_PC: u32 = 0;
const CFP_ISEQ: u32 = 16;
const CFP_EP: u32 = 32;
/// The largest control frame of any release (3.1's), and the smallest (3.3's).
const MAX_CONTROL_FRAME: u32 = 64;
const MIN_CONTROL_FRAME: u32 = 56;
/// A VM stack larger than this many words is not Ruby's (its default is 128 Ki words).
const MAX_VM_STACK_WORDS: u64 = 1 << 24;

/// `ep[0]`'s flags: the frame's magic, and bits Ruby sets on frames and environments.
const FRAME_MAGIC_MASK: u64 = 0x7fff_0001;
const FRAME_MAGIC_CFUNC: u64 = 0x5555_0001;
const FRAME_FLAG_FINISH: u64 = 0x20;
const FRAME_FLAG_CFRAME: u64 = 0x80;
const ENV_FLAG_LOCAL: u64 = 0x2;

/// Object type tags (`flags & 0x1f`), and the kinds of internal objects (`flags >> 12 & 0xf`).
const TYPE_MASK: u64 = 0x1f;
const T_IMEMO: u64 = 0x1a;
const IMEMO_SVAR: u64 = 2;
const IMEMO_MENT: u64 = 6;
/// `vm_svar.cref_or_me`.
const SVAR_CREF_OR_ME: u64 = 8;
/// Environments looked through, outwards from a block's, for its method entry (the most a Rails
/// application was seen to nest is 6).
const MAX_ENV_STEPS: u32 = 8;

/// Walks the Ruby frames of the current thread of `process` into `frames` (room for
/// [`MAX_RUBY_FRAMES`]); returns the outcome and the bytes of records written.
pub fn walk(process: &RuntimeProcess, _tid: u32, frames: *mut u8) -> (RuntimeWalk, u32) {
    let (Some(process), Some(reads)) = (RubyProcess::of_runtime(process), RUBY_READS.get_ptr_mut(0)) else {
        return (RuntimeWalk::ReadError, 0);
    };
    let reads = unsafe { &mut *reads };
    set_written(reads, 0);
    let ec = match thread_local(process.ec_offset) {
        Some(0) => return (RuntimeWalk::NotItsThread, 0),
        Some(ec) => ec,
        None => return (RuntimeWalk::ReadError, 0),
    };
    let state = thread_state(process, ec);
    if state != 0 {
        let pc_flags = ruby_frame_flags::THREAD_STATE | state << ruby_frame_flags::THREAD_STATE_SHIFT;
        let marker = RubyFrame { iseq: 0, method: 0, pc_flags };
        unsafe { frames.cast::<RubyFrame>().write_unaligned(marker) };
        set_written(reads, 1);
    }
    let outcome = match stack(process, ec) {
        Ok(Some((cfp, end))) => walk_frames(process, cfp, end, reads, frames),
        Ok(None) => RuntimeWalk::Complete,
        Err(outcome) => outcome,
    };
    let len = written(reads).min(MAX_RUBY_FRAMES as u32);
    (outcome, len * size_of::<RubyFrame>() as u32)
}

/// What the thread whose execution context is `ec` does besides running its frames, one of
/// [`thread_states`] (0 for nothing): collecting garbage, when the VM collects and the
/// thread holds the main Ractor's GVL (which a collection holds; another thread may run C code
/// without it meanwhile); waiting for the GVL, when it does not hold it, is runnable, and is not
/// in a blocking region (I/O and C code that let the GVL go, on purpose).
fn thread_state(process: &RubyProcess, ec: u64) -> u64 {
    let (Some(vm), Some(thread)) =
        (read_u64(process.vm_ptr), read_u64(ec.wrapping_add(RubyProcess::EC_THREAD)))
    else {
        return 0;
    };
    let owner = read_u64(vm.wrapping_add(RubyProcess::VM_MAIN_RACTOR))
        .and_then(|ractor| read_u64(ractor.wrapping_add(u64::from(process.ractor_gvl_owner))));
    let Some(owner) = owner else { return 0 };
    if owner == thread {
        let flags = read_u64(vm.wrapping_add(u64::from(process.vm_objspace)))
            .and_then(|objspace| read_u64(objspace.wrapping_add(RubyProcess::OBJSPACE_FLAGS)));
        let collecting = flags.is_some_and(|flags| flags as u32 & RubyProcess::DURING_GC != 0);
        return if collecting { thread_states::IN_GC } else { 0 };
    }
    let status = read_u64(thread.wrapping_add(u64::from(process.thread_status)));
    let blocking = read_u64(thread.wrapping_add(u64::from(process.thread_blocking_region)));
    match (status, blocking) {
        (Some(status), Some(0)) if status & RubyProcess::STATUS_MASK == RubyProcess::RUNNABLE => {
            thread_states::WAITING_FOR_GVL
        }
        _ => 0,
    }
}

/// The thread's innermost control frame and the end of its VM stack's frames (its dummy first
/// frame): `None` when it runs no Ruby code yet.
fn stack(process: &RubyProcess, ec: u64) -> Result<Option<(u64, u64)>, RuntimeWalk> {
    let mut head = [0u8; 24];
    unsafe { read_user(head.as_mut_ptr(), head.len(), ec) }.map_err(|_| RuntimeWalk::ReadError)?;
    let (vm_stack, words, cfp) = (
        field(&head, 0).ok_or(RuntimeWalk::ReadError)?,
        field(&head, 8).ok_or(RuntimeWalk::ReadError)?,
        field(&head, 16).ok_or(RuntimeWalk::ReadError)?,
    );
    if cfp == 0 {
        return Ok(None);
    }
    let frame_bytes = u64::from(process.control_frame_bytes);
    if !(MIN_CONTROL_FRAME as u64..=MAX_CONTROL_FRAME as u64).contains(&frame_bytes)
        || words == 0
        || words > MAX_VM_STACK_WORDS
    {
        return Err(RuntimeWalk::ReadError);
    }
    let end = vm_stack.wrapping_add(words * 8).wrapping_sub(frame_bytes);
    if cfp < vm_stack || cfp > end || (end - cfp) % frame_bytes != 0 {
        return Err(RuntimeWalk::ReadError);
    }
    Ok(Some((cfp, end)))
}

/// Follows the control frames from `cfp` up to `end`, one per `bpf_loop` step: the verifier
/// checks a step once, where a loop in the program would be checked once per iteration.
fn walk_frames(process: &RubyProcess, cfp: u64, end: u64, reads: &mut Reads, frames: *mut u8) -> RuntimeWalk {
    let mut walk = Walk {
        reads,
        frames,
        cfp,
        end,
        frame_bytes: u64::from(process.control_frame_bytes),
        outcome: RuntimeWalk::Truncated as u32,
    };
    let step: unsafe extern "C" fn(u64, *mut c_void) -> i64 = step;
    unsafe { bpf_loop(MAX_RUBY_FRAMES as u32 + 1, step as *mut c_void, (&raw mut walk).cast(), 0) };
    walk_of(walk.outcome).unwrap_or(RuntimeWalk::ReadError)
}

/// The state of a walk, between its steps.
struct Walk<'a> {
    reads: &'a mut Reads,
    /// Where the records go (room for [`MAX_RUBY_FRAMES`]).
    frames: *mut u8,
    /// The next control frame, and where they end.
    cfp: u64,
    end: u64,
    frame_bytes: u64,
    /// A [`RuntimeWalk`], once it is known.
    outcome: u32,
}

/// `bpf_loop`'s callback: one control frame of the walk in `walk`. Returns 1 to stop.
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

/// Reads the next control frame of `walk` and writes its record; `Err` ends the walk with that
/// outcome.
fn read_frame(walk: &mut Walk) -> Result<(), RuntimeWalk> {
    if walk.cfp >= walk.end {
        return Err(RuntimeWalk::Complete);
    }
    let mut cfp = [0u8; CONTROL_FRAME_BYTES];
    unsafe { read_user(cfp.as_mut_ptr(), cfp.len(), walk.cfp) }.map_err(|_| RuntimeWalk::ReadError)?;
    walk.cfp += walk.frame_bytes;
    let pc = field(&cfp, CFP_PC).ok_or(RuntimeWalk::ReadError)?;
    let ep = field(&cfp, CFP_EP).ok_or(RuntimeWalk::ReadError)?;
    let env = read_env(ep).ok_or(RuntimeWalk::ReadError)?;
    let flags = env.flags;
    let mut pc_flags = if flags & FRAME_FLAG_FINISH != 0 { ruby_frame_flags::RUN_END } else { 0 };
    let record = if flags & FRAME_FLAG_CFRAME != 0 || pc == 0 {
        pc_flags |= ruby_frame_flags::C_FRAME;
        let cfunc = flags & FRAME_MAGIC_MASK == FRAME_MAGIC_CFUNC;
        let method =
            if cfunc && imemo_type(env.method_or_cref) == Some(IMEMO_MENT) { env.method_or_cref } else { 0 };
        RubyFrame { iseq: 0, method, pc_flags }
    } else {
        let iseq = field(&cfp, CFP_ISEQ).ok_or(RuntimeWalk::ReadError)?;
        RubyFrame { iseq, method: method_entry(env), pc_flags: pc_flags | (pc & !ruby_frame_flags::MASK) }
    };
    if record.iseq == 0 && record.method == 0 && record.pc_flags & ruby_frame_flags::RUN_END == 0 {
        // A C frame of no method (a block given by C code): nothing to name, no run to end.
        return Ok(());
    }
    let at = bounded(written(walk.reads), MAX_RUBY_FRAMES - 1).ok_or(RuntimeWalk::Truncated)?;
    unsafe { walk.frames.add(at * size_of::<RubyFrame>()).cast::<RubyFrame>().write_unaligned(record) };
    set_written(walk.reads, at as u32 + 1);
    Ok(())
}

/// A frame's environment: `ep[-2]`, `ep[-1]` and `ep[0]`.
#[derive(Clone, Copy)]
struct Env {
    /// The method entry, a `cref` (class body, top level) or an `svar`.
    method_or_cref: u64,
    /// The outer environment (`& !3`) of a block's.
    specval: u64,
    flags: u64,
}

fn read_env(ep: u64) -> Option<Env> {
    let mut words = [0u8; 24];
    unsafe { read_user(words.as_mut_ptr(), words.len(), ep.wrapping_sub(16)) }.ok()?;
    Some(Env { method_or_cref: field(&words, 0)?, specval: field(&words, 8)?, flags: field(&words, 16)? })
}

/// The method entry of the frame whose environment is `env`, as Ruby finds it
/// (`rb_vm_frame_method_entry`): a block's is its method's, some environments out; 0 for none.
fn method_entry(mut env: Env) -> u64 {
    for _ in 0..MAX_ENV_STEPS {
        let kind = imemo_type(env.method_or_cref);
        if kind == Some(IMEMO_MENT) {
            return env.method_or_cref;
        }
        if env.flags & ENV_FLAG_LOCAL != 0 {
            // Frames that use `$~` or `$_` keep their method entry in an `svar`.
            if kind != Some(IMEMO_SVAR) {
                return 0;
            }
            let method = read_u64(env.method_or_cref + SVAR_CREF_OR_ME).unwrap_or(0);
            return if imemo_type(method) == Some(IMEMO_MENT) { method } else { 0 };
        }
        match read_env(env.specval & !3) {
            Some(outer) => env = outer,
            None => return 0,
        }
    }
    0
}

/// The kind of internal object at `object`, if it is one.
fn imemo_type(object: u64) -> Option<u64> {
    if object == 0 {
        return None;
    }
    let flags = read_u64(object)?;
    (flags & TYPE_MASK == T_IMEMO).then_some((flags >> 12) & 0xf)
}

fn written(reads: &Reads) -> u32 {
    unsafe { core::ptr::read_volatile(&reads.written) }
}

fn set_written(reads: &mut Reads, count: u32) {
    unsafe { core::ptr::write_volatile(&mut reads.written, count) }
}
