//! Stepping the frames of a JVM's code cache, by HotSpot's own rules for x86-64, on the copied
//! stack: a compiled frame (an nmethod, a native method's wrapper, a stub with a frame) is its
//! blob's frame size above its stack pointer, with the return address and the caller's frame
//! pointer in its top two words (kept whether or not the JIT keeps frame pointers); an
//! interpreted frame hangs off its frame pointer, with its `Method*` and bytecode pointer in
//! fixed slots below it; the call stub, where Java is entered from `libjvm.so`, is a frame
//! pointer frame too. Only the innermost frame, which may be anywhere in its code, gets guesses
//! (a prologue or epilogue half done, a stub with no frame); a frame that fails its checks ends
//! the walk.
use framehop::x86_64::UnwindRegsX86_64;

use super::{
    Jvm,
    code_cache::{Blob, BlobKind},
};
use crate::unwind::{RuntimeCode, RuntimeStep, StackSnapshot};

/// Interpreter frame slots, in words from its frame pointer (docs/hotspot-layouts.md §2.6):
/// the caller's stack pointer as it was before the callee extended it, the `Method*`, and the
/// bytecode pointer as last saved.
const SENDER_SP_SLOT: u64 = 1;
const METHOD_SLOT: u64 = 3;
const BCP_SLOT: u64 = 8;
/// Largest interpreted frame taken (locals, monitors and the expression stack below its frame
/// pointer), and the largest extension of a caller's frame by a callee's arguments.
const MAX_INTERPRETED_FRAME: u64 = 1 << 16;

/// A Java frame as the walk found it, to be named once the stack is walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Physical {
    /// Compiled code at `pc` of the nmethod at `blob`: `exact` for a return address, which has
    /// debug information of its own.
    Compiled { blob: u64, compile_id: u32, pc: u64, exact: bool },
    /// The interpreter running `method`, at bytecode pointer `bcp`, or at `saved_bcp` (the
    /// frame's slot, up to date at calls) when `bcp` is not one of the method's.
    Interpreted { method: u64, bcp: u64, saved_bcp: u64 },
    /// The wrapper of native method `method`.
    Native { method: u64 },
    /// A stub (an adapter, a runtime stub) named by the string at `name` of `libjvm.so`.
    Stub { name: u64 },
    /// The call stub, through which `libjvm.so` calls Java.
    CallStub,
}

impl RuntimeCode for Jvm {
    fn step(
        &mut self,
        depth: usize,
        regs: &UnwindRegsX86_64,
        stack: &StackSnapshot<'_>,
        is_code: &mut dyn FnMut(u64) -> bool,
    ) -> RuntimeStep {
        let pc = regs.ip();
        if !self.code_cache.contains(&pc) {
            return RuntimeStep::NotMine;
        }
        let step = self.step_frame(depth, regs, stack, is_code);
        match step {
            Some((caller, physical)) => {
                self.stepped.push((depth, physical));
                RuntimeStep::Caller(caller)
            }
            None => {
                self.lost += 1;
                RuntimeStep::Lost
            }
        }
    }
}

/// The caller of a frame, and what the frame was.
type Stepped = Option<(UnwindRegsX86_64, Physical)>;

impl Jvm {
    fn step_frame(
        &mut self,
        depth: usize,
        regs: &UnwindRegsX86_64,
        stack: &StackSnapshot<'_>,
        is_code: &mut dyn FnMut(u64) -> bool,
    ) -> Stepped {
        let (pc, sp, fp) = (regs.ip(), regs.sp(), regs.bp());
        if pc == self.call_stub_return {
            return Some((by_frame_pointer(stack, sp, fp)?, Physical::CallStub));
        }
        let blob = match self.find_blob(pc) {
            Some(blob) => blob,
            // Code compiled since the heaps were read, in a part committed since.
            None if !self.heaps.iter().any(|heap| heap.code.contains(&pc)) => {
                self.reread_heaps();
                self.find_blob(pc)?
            }
            None => return None,
        };
        let innermost = depth == 0;
        match self.kind(blob.name) {
            BlobKind::Interpreter => {
                let caller = by_frame_pointer(stack, sp, fp).filter(|caller| is_code(caller.ip()))?;
                let method = stack.read_u64(fp.checked_sub(8 * METHOD_SLOT)?)?;
                let saved_bcp = stack.read_u64(fp.checked_sub(8 * BCP_SLOT)?)?;
                // The innermost frame's live bytecode pointer is in r13, when it is running.
                let bcp = if innermost { self.innermost_r13 } else { saved_bcp };
                // The caller's own stack pointer, for a compiled caller whose frame the call
                // extended with arguments.
                let sender_sp = stack.read_u64(fp.checked_sub(8 * SENDER_SP_SLOT)?)?;
                let caller_sp = caller.sp();
                let sp = if (caller_sp..caller_sp + MAX_INTERPRETED_FRAME).contains(&sender_sp) {
                    sender_sp
                } else {
                    caller_sp
                };
                let caller = UnwindRegsX86_64::new(caller.ip(), sp, caller.bp());
                Some((caller, Physical::Interpreted { method, bcp, saved_bcp }))
            }
            kind => {
                let physical = match kind {
                    BlobKind::Nmethod => {
                        let (pc, exact) = match deoptimized_pc(&blob, pc, sp, stack) {
                            Some(original) => (original, true),
                            None => (pc, !innermost),
                        };
                        Physical::Compiled { blob: blob.address, compile_id: blob.compile_id, pc, exact }
                    }
                    BlobKind::NativeWrapper => Physical::Native { method: blob.method },
                    _ => Physical::Stub { name: blob.name },
                };
                let complete = pc >= blob.frame_complete;
                let by_size = (blob.frame_size > 0 && (complete || !innermost))
                    .then(|| by_frame_size(stack, sp, blob.frame_size))
                    .flatten()
                    .filter(|caller| is_code(caller.ip()));
                let caller = match by_size {
                    Some(caller) => caller,
                    None if innermost => half_built(stack, sp, fp, is_code)?,
                    // A stub without a frame size keeps a frame pointer frame.
                    None if blob.frame_size == 0 => {
                        by_frame_pointer(stack, sp, fp).filter(|caller| is_code(caller.ip()))?
                    }
                    None => return None,
                };
                Some((caller, physical))
            }
        }
    }

    /// The blob holding `pc`: one this stack found already, or read.
    fn find_blob(&mut self, pc: u64) -> Option<Blob> {
        if let Some(blob) = self.blobs.iter().find(|blob| blob.code.contains(&pc)) {
            return Some(blob.clone());
        }
        let blob = super::code_cache::find_blob(&self.layout, &self.heaps, pc, &mut *self.memory)?;
        self.blobs.push(blob.clone());
        Some(blob)
    }
}

/// The pc a frame being deoptimized was at, when `pc` is its nmethod's deoptimization handler:
/// HotSpot put the handler in place of the frame's return address and kept the original in
/// the frame (its debug information is at the original, the handler has none).
fn deoptimized_pc(blob: &Blob, pc: u64, sp: u64, stack: &StackSnapshot<'_>) -> Option<u64> {
    if pc == 0 || !blob.deopt_handlers.contains(&pc) {
        return None;
    }
    // Within the frame: a slot of it.
    let offset = blob.orig_pc_offset.filter(|offset| offset.saturating_add(8) <= blob.frame_size)?;
    let original = stack.read_u64(sp.checked_add(offset)?)?;
    blob.code.contains(&original).then_some(original)
}

/// The caller of a frame whose frame pointer `fp` points at the caller's saved one, the return
/// address above it.
fn by_frame_pointer(stack: &StackSnapshot<'_>, sp: u64, fp: u64) -> Option<UnwindRegsX86_64> {
    if fp <= sp || !fp.is_multiple_of(8) || fp - sp > MAX_INTERPRETED_FRAME {
        return None;
    }
    let return_address = stack.read_u64(fp + 8)?;
    let caller_fp = stack.read_u64(fp)?;
    Some(UnwindRegsX86_64::new(return_address, fp + 16, caller_fp))
}

/// The caller of a complete frame of `size` bytes from `sp`: the return address in its top word,
/// the caller's frame pointer below it.
fn by_frame_size(stack: &StackSnapshot<'_>, sp: u64, size: u64) -> Option<UnwindRegsX86_64> {
    let top = sp.checked_add(size)?;
    let return_address = stack.read_u64(top - 8)?;
    let caller_fp = stack.read_u64(top - 16)?;
    Some(UnwindRegsX86_64::new(return_address, top, caller_fp))
}

/// The caller of an innermost frame not (or no longer) built: just entered or about to return
/// (the return address on top of the stack), or with only the frame pointer pushed.
fn half_built(
    stack: &StackSnapshot<'_>,
    sp: u64,
    fp: u64,
    is_code: &mut dyn FnMut(u64) -> bool,
) -> Option<UnwindRegsX86_64> {
    let top = stack.read_u64(sp)?;
    if is_code(top) {
        return Some(UnwindRegsX86_64::new(top, sp + 8, fp));
    }
    let below = stack.read_u64(sp + 8)?;
    is_code(below).then(|| UnwindRegsX86_64::new(below, sp + 16, top))
}
