//! Stepping V8's frames on the copied stack: every frame of V8's code (its JIT code in
//! anonymous memory, its embedded builtins in the binary's text, which have no CFI) keeps a
//! frame pointer, with the caller's frame pointer and the return address above it. Each frame
//! stepped is remembered with its frame pointer, for naming once the stack is walked: the slot
//! below the frame pointer holds a frame type marker (a small integer: V8's own frames, entry
//! and exit frames, stubs) or a context (a JavaScript frame, whose `JSFunction` is in the slot
//! below).
use framehop::x86_64::UnwindRegsX86_64;

use super::V8Process;
use crate::unwind::{RuntimeCode, RuntimeStep, StackSnapshot};

/// A JavaScript frame found on the stack, to be named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct JsFrame {
    /// The tagged `JSFunction` of its function slot.
    pub function: u64,
}

impl RuntimeCode for V8Process {
    fn steps_module(&self, module: crate::address_space::ModuleId) -> bool {
        module == self.module
    }

    fn step(
        &mut self,
        depth: usize,
        regs: &UnwindRegsX86_64,
        stack: &StackSnapshot<'_>,
        is_code: &mut dyn FnMut(u64) -> bool,
    ) -> RuntimeStep {
        let pc = regs.ip();
        if !self.builtins.contains(pc) && self.text.contains(pc) {
            return RuntimeStep::NotMine;
        }
        match self.step_frame(regs, stack, is_code) {
            Some((caller, frame)) => {
                if let Some(frame) = frame {
                    self.stepped.push((depth, frame));
                }
                RuntimeStep::Caller(caller)
            }
            None => {
                self.lost += 1;
                RuntimeStep::Lost
            }
        }
    }
}

impl V8Process {
    /// The caller of the frame of `regs`, by its frame pointer, and the JavaScript frame it is
    /// if it is one.
    fn step_frame(
        &self,
        regs: &UnwindRegsX86_64,
        stack: &StackSnapshot<'_>,
        is_code: &mut dyn FnMut(u64) -> bool,
    ) -> Option<(UnwindRegsX86_64, Option<JsFrame>)> {
        let fp = regs.bp();
        if fp < regs.sp() || !fp.is_multiple_of(8) {
            return None;
        }
        let caller_fp = stack.read_u64(fp)?;
        let return_address = stack.read_u64(fp.checked_add(8)?)?;
        if !is_code(return_address) {
            return None;
        }
        let caller = UnwindRegsX86_64::new(return_address, fp + 16, caller_fp);
        Some((caller, self.js_frame(fp, stack)))
    }

    /// The JavaScript frame whose frame pointer is `fp`, if its slots say it is one.
    fn js_frame(&self, fp: u64, stack: &StackSnapshot<'_>) -> Option<JsFrame> {
        let layout = self.layout.as_ref();
        let context = stack.read_u64(fp.checked_add_signed(layout.fp_context_or_marker)?)?;
        // A marker is a small integer (its low bit clear); a context, a tagged pointer.
        if context & 1 == 0 {
            return None;
        }
        let function = stack.read_u64(fp.checked_add_signed(layout.fp_function)?)?;
        super::heap::untag(function)?;
        Some(JsFrame { function })
    }
}
