//! Perl frames, read at sample time: a threaded Perl keeps each thread's interpreter in a
//! thread-local variable (`PL_current_context`: userspace says where, per process, in
//! `RUNTIME_PROCESSES`), and the interpreter its frames as contexts on the stack of its current
//! stackinfo, whose callers are on the stackinfos C code pushed it from (`si_prev`).
//!
//! Each sub's, format's and eval's context becomes a [`PerlFrame`]: the code it runs, the
//! statement it is at (the interpreter's current one for the innermost, the one each called the
//! next from for the others), and whether its return leaves the op loop. A `sort` block's context
//! and each stackinfo's end become markers, from which userspace tells which native call of the
//! op loop runs which frames. Every read goes through `bpf_probe_read_user`, every walk is
//! bounded: a target with a garbage stack costs failed reads, never more.
use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{helpers::generated::bpf_loop, macros::map, maps::PerCpuArray};
use profiler_common::runtimes::{
    ProcessRecord, RuntimeProcess, RuntimeWalk,
    perl::{MAX_PERL_FRAMES, PerlFrame, PerlProcess, perl_frame_flags},
};

use super::{
    fields::{bounded, byte, field, field_i32, read_u64, walk_of},
    thread::thread_local,
};
use crate::memory::read_user;

/// What a CPU keeps of a walk out of the verifier's sight (see the Ruby walker's).
#[repr(C)]
pub struct Reads {
    written: u32,
}

#[map(name = "PERL_READS")]
static PERL_READS: PerCpuArray<Reads> = PerCpuArray::with_max_entries(1, 0);

/// Contexts and stackinfos looked at in a sample at most: loops' and blocks' contexts are
/// stepped over too.
const MAX_STEPS: u32 = 2048;
/// Bytes read of a context: up to its eval's `cur_text`; of a stackinfo: up to its type.
const CONTEXT_READ: usize = 88;
const STACKINFO_READ: usize = 48;
/// A context stack larger than this is not Perl's (a recursion 300 deep has 385 slots).
const MAX_CONTEXTS: i32 = 1 << 20;

/// Walks the Perl frames of the current thread of `process` into `frames` (room for
/// [`MAX_PERL_FRAMES`]); returns the outcome and the bytes of records written.
pub fn walk(process: &RuntimeProcess, _tid: u32, frames: *mut u8) -> (RuntimeWalk, u32) {
    let (Some(process), Some(reads)) = (PerlProcess::of_runtime(process), PERL_READS.get_ptr_mut(0)) else {
        return (RuntimeWalk::ReadError, 0);
    };
    let reads = unsafe { &mut *reads };
    set_written(reads, 0);
    let interpreter = match thread_local(process.interpreter_offset) {
        Some(0) => return (RuntimeWalk::NotItsThread, 0),
        Some(interpreter) => interpreter,
        None => return (RuntimeWalk::ReadError, 0),
    };
    let (Some(statement), Some(stackinfo)) = (
        read_u64(interpreter.wrapping_add(PerlProcess::INTERPRETER_CURCOP)),
        read_u64(interpreter.wrapping_add(PerlProcess::INTERPRETER_CURSTACKINFO)),
    ) else {
        return (RuntimeWalk::ReadError, 0);
    };
    let mut walk = Walk {
        reads,
        frames,
        statement,
        contexts: 0,
        index: -1,
        stackinfo_type: 0,
        prev: 0,
        outermost: PerlFrame::NO_CONTEXT,
        outcome: RuntimeWalk::Truncated as u32,
    };
    if let Err(outcome) = enter_stackinfo(&mut walk, stackinfo) {
        return (outcome, 0);
    }
    let step: unsafe extern "C" fn(u64, *mut c_void) -> i64 = step;
    unsafe { bpf_loop(MAX_STEPS, step as *mut c_void, (&raw mut walk).cast(), 0) };
    let outcome = walk_of(walk.outcome).unwrap_or(RuntimeWalk::ReadError);
    let len = written(walk.reads).min(MAX_PERL_FRAMES as u32);
    (outcome, len * size_of::<PerlFrame>() as u32)
}

/// The state of a walk, between its steps.
struct Walk<'a> {
    reads: &'a mut Reads,
    frames: *mut u8,
    /// The statement the next frame is at.
    statement: u64,
    /// The current stackinfo's contexts, the next one's index (-1: none left), its type, and
    /// the type of the last context read of it.
    contexts: u64,
    index: i32,
    stackinfo_type: i32,
    outermost: u16,
    /// The stackinfo outer to the current one.
    prev: u64,
    outcome: u32,
}

/// `bpf_loop`'s callback: one context of the walk in `walk`, or the end of a stackinfo. Returns 1
/// to stop.
unsafe extern "C" fn step(_index: u64, walk: *mut c_void) -> i64 {
    let walk = unsafe { &mut *walk.cast::<Walk>() };
    let stepped = if walk.index < 0 { leave_stackinfo(walk) } else { read_context(walk) };
    match stepped {
        Ok(()) => 0,
        Err(outcome) => {
            walk.outcome = outcome as u32;
            1
        }
    }
}

/// Makes the stackinfo at `stackinfo` the walk's current one.
fn enter_stackinfo(walk: &mut Walk, stackinfo: u64) -> Result<(), RuntimeWalk> {
    let mut head = [0u8; STACKINFO_READ];
    unsafe { read_user(head.as_mut_ptr(), head.len(), stackinfo) }.map_err(|_| RuntimeWalk::ReadError)?;
    let index = field_i32(&head, PerlProcess::STACKINFO_INDEX).ok_or(RuntimeWalk::ReadError)?;
    let max = field_i32(&head, PerlProcess::STACKINFO_MAX).ok_or(RuntimeWalk::ReadError)?;
    if index < -1 || index > max || max >= MAX_CONTEXTS {
        return Err(RuntimeWalk::ReadError);
    }
    walk.contexts = field(&head, PerlProcess::STACKINFO_CONTEXTS).ok_or(RuntimeWalk::ReadError)?;
    walk.prev = field(&head, PerlProcess::STACKINFO_PREV).ok_or(RuntimeWalk::ReadError)?;
    walk.stackinfo_type = field_i32(&head, PerlProcess::STACKINFO_TYPE).ok_or(RuntimeWalk::ReadError)?;
    walk.index = index;
    walk.outermost = PerlFrame::NO_CONTEXT;
    Ok(())
}

/// Marks the end of the current stackinfo, and goes on to the one outer to it, unless it is the
/// thread's first.
fn leave_stackinfo(walk: &mut Walk) -> Result<(), RuntimeWalk> {
    let end = PerlFrame {
        code: 0,
        statement: walk.statement,
        context: walk.outermost,
        stackinfo: walk.stackinfo_type as i16,
        flags: perl_frame_flags::STACKINFO_END,
    };
    write(walk, end)?;
    if walk.stackinfo_type == PerlProcess::STACKINFO_MAIN || walk.prev == 0 {
        return Err(RuntimeWalk::Complete);
    }
    enter_stackinfo(walk, walk.prev)
}

/// Reads the next context of the current stackinfo, and writes its record if it is a frame or a
/// `sort` block's.
fn read_context(walk: &mut Walk) -> Result<(), RuntimeWalk> {
    let at = walk.contexts.wrapping_add((walk.index as u64).wrapping_mul(PerlProcess::CONTEXT_BYTES));
    walk.index -= 1;
    let mut context = [0u8; CONTEXT_READ];
    unsafe { read_user(context.as_mut_ptr(), context.len(), at) }.map_err(|_| RuntimeWalk::ReadError)?;
    let context_type = byte(&context, 0).ok_or(RuntimeWalk::ReadError)?;
    walk.outermost = u16::from(context_type);
    let code = match context_type & PerlProcess::CONTEXT_TYPE_MASK {
        PerlProcess::CXT_SUB | PerlProcess::CXT_FORMAT
            if context_type & PerlProcess::CXP_SUB_RE_FAKE == 0 =>
        {
            field(&context, PerlProcess::CONTEXT_CV).ok_or(RuntimeWalk::ReadError)?
        }
        PerlProcess::CXT_EVAL if context_type & PerlProcess::CXP_EVAL_KINDS == 0 => {
            field(&context, PerlProcess::CONTEXT_EVAL_TEXT).ok_or(RuntimeWalk::ReadError)?
        }
        PerlProcess::CXT_EVAL => 0,
        PerlProcess::CXT_NULL => {
            let block = PerlFrame { flags: perl_frame_flags::SORT_BLOCK, ..PerlFrame::default() };
            return write(walk, block);
        }
        _ => return Ok(()),
    };
    let retop = field(&context, PerlProcess::CONTEXT_RETOP).ok_or(RuntimeWalk::ReadError)?;
    let flags = if retop == 0 { perl_frame_flags::RETURNS_TO_C } else { 0 };
    let frame =
        PerlFrame { code, statement: walk.statement, context: u16::from(context_type), stackinfo: 0, flags };
    walk.statement = field(&context, PerlProcess::CONTEXT_OLDCOP).ok_or(RuntimeWalk::ReadError)?;
    write(walk, frame)
}

/// Writes `record` after those written.
fn write(walk: &mut Walk, record: PerlFrame) -> Result<(), RuntimeWalk> {
    let at = bounded(written(walk.reads), MAX_PERL_FRAMES - 1).ok_or(RuntimeWalk::Truncated)?;
    unsafe { walk.frames.add(at * size_of::<PerlFrame>()).cast::<PerlFrame>().write_unaligned(record) };
    set_written(walk.reads, at as u32 + 1);
    Ok(())
}

fn written(reads: &Reads) -> u32 {
    unsafe { core::ptr::read_volatile(&reads.written) }
}

fn set_written(reads: &mut Reads, count: u32) {
    unsafe { core::ptr::write_volatile(&mut reads.written, count) }
}
