//! Stepping Go's frames by its table: at a PC of a Go function, the table says how far the
//! stack pointer is below where it was at the function's entry, so the return address is there
//! and the caller's stack pointer just above it. A function with a frame saved its caller's
//! frame pointer just below its return address (Go keeps frame pointers on x86-64), which C
//! callers' CFI may need.
use framehop::x86_64::UnwindRegsX86_64;

use super::{GoProcess, lookup_svma, table::Function};
use crate::{
    address_space::ModuleId,
    unwind::{RuntimeCode, RuntimeStep, StackSnapshot},
};

/// The functions Go's stacks start in: a goroutine's (`goexit`, under its first function), a
/// thread's (`mstart`) and the program's (`rt0_go`). Nothing of Go's is above them.
const OUTERMOST: [&[u8]; 3] = [b"runtime.goexit", b"runtime.mstart", b"runtime.rt0_go"];

/// The function C calls Go through: its caller, as stepped, is the goroutine's call into C.
const CALL_FROM_C: &[u8] = b"runtime.cgocallback";
/// Where a goroutine's call into C is said to be: the return address above `cgocallback`.
const LEFT_FOR_C: &[u8] = b"runtime.systemstack_switch";

impl GoProcess {
    /// The Go function of the frame at `depth` at `pc`, if it is in Go's text.
    pub(super) fn function_at(&self, depth: usize, pc: u64) -> Option<Function> {
        self.text.contains(&pc).then(|| self.binary.table.function(lookup_svma(depth, pc, self.bias)))?
    }

    /// Whether `function` is one Go's stacks start in.
    pub(super) fn is_outermost(&self, function: Function) -> bool {
        OUTERMOST.iter().any(|name| self.binary.table.is_named(function, name))
    }
}

impl RuntimeCode for GoProcess {
    fn steps_module(&self, module: ModuleId) -> bool {
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
        // The C code of a cgo binary has CFI of its own. A caller's function is the call's: a
        // call may end its function (one that does not return), its return address then the
        // next function's entry.
        let Some(function) = self.function_at(depth, pc) else { return RuntimeStep::NotMine };
        let table = &self.binary.table;
        if self.is_outermost(function) {
            return RuntimeStep::Outermost;
        }
        // Where a function moved its stack pointer to another stack (`systemstack`, onto the
        // thread's own), its caller is there, unless the sample was taken in it. A call from C
        // back into Go (`cgocallback`) is a caller of its own kind: on the goroutine's stack, it
        // opens a frame the size of its frame on the thread's, under the address the goroutine
        // left for C at, so that its frame is stepped as any other, back into the goroutine's
        // calls (as Go's own tracebacks are; the C frames between are on the thread's stack).
        let from_c = depth > 0 && table.is_named(function, CALL_FROM_C);
        if depth > 0 && table.writes_sp(function) && !from_c {
            return RuntimeStep::OtherStack;
        }
        let svma = pc.wrapping_sub(self.bias);
        let caller = table.sp_offset(function, svma, &mut self.work).and_then(|offset| {
            let at = regs.sp().checked_add(offset)?;
            let return_address = stack.read_u64(at)?;
            let bp = match offset {
                0 => regs.bp(),
                _ => stack.read_u64(at.checked_sub(8)?)?,
            };
            let caller_sp = at.checked_add(8)?;
            is_code(return_address).then(|| UnwindRegsX86_64::new(return_address, caller_sp, bp))
        });
        match caller {
            // The goroutine left for C at `systemstack_switch` (asmcgocall saves it there, as
            // 1.26 and 1.27 do); where it is not (1.19's is what the goroutine saved last, in
            // `mcall`), the call into C is not known and the stack ends.
            Some(caller)
                if from_c
                    && !self
                        .function_at(depth + 1, caller.ip())
                        .is_some_and(|function| table.is_named(function, LEFT_FOR_C)) =>
            {
                RuntimeStep::OtherStack
            }
            Some(caller) => RuntimeStep::Caller(caller),
            None => {
                self.lost += 1;
                RuntimeStep::Lost
            }
        }
    }
}
