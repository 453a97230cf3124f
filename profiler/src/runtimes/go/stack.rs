//! Stepping Go's frames by its table: at a PC of a Go function, the table says how far the
//! stack pointer is below where it was at the function's entry, so the return address is there
//! and the caller's stack pointer just above it. A function with a frame saved its caller's
//! frame pointer just below its return address (Go keeps frame pointers on x86-64), which C
//! callers' CFI may need.
use framehop::x86_64::UnwindRegsX86_64;

use super::GoProcess;
use crate::{
    address_space::ModuleId,
    unwind::{RuntimeCode, RuntimeStep, StackSnapshot},
};

/// The functions Go's stacks start in: a goroutine's (`goexit`, under its first function), a
/// thread's (`mstart`) and the program's (`rt0_go`). Nothing of Go's is above them.
const OUTERMOST: [&[u8]; 3] = [b"runtime.goexit", b"runtime.mstart", b"runtime.rt0_go"];

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
        // The C code of a cgo binary has CFI of its own.
        if !self.text.contains(&pc) {
            return RuntimeStep::NotMine;
        }
        let table = &self.binary.table;
        let svma = pc.wrapping_sub(self.bias);
        let Some(function) = table.function(svma) else { return RuntimeStep::NotMine };
        let outermost = table.name(function).is_some_and(|name| OUTERMOST.contains(&name));
        // A function that moved its stack pointer elsewhere (`systemstack`, onto the thread's
        // stack) is where this stack's copy ends, unless it is where the sample was taken.
        if outermost || (depth > 0 && table.writes_sp(function)) {
            return RuntimeStep::Outermost;
        }
        let caller = table.sp_offset(function, svma, &mut self.work).and_then(|offset| {
            let at = regs.sp().checked_add(offset)?;
            let return_address = stack.read_u64(at)?;
            let bp = match offset {
                0 => regs.bp(),
                _ => stack.read_u64(at - 8)?,
            };
            is_code(return_address).then(|| UnwindRegsX86_64::new(return_address, at + 8, bp))
        });
        match caller {
            Some(caller) => RuntimeStep::Caller(caller),
            None => {
                self.lost += 1;
                RuntimeStep::Lost
            }
        }
    }
}
