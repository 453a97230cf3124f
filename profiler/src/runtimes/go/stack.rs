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
/// Where a goroutine that left its stack for its thread's is said to be: the return address
/// above `cgocallback`, and `g.sched`'s PC when `systemstack` or `asmcgocall` left it.
const LEFT_STACK: &[u8] = b"runtime.systemstack_switch";
/// The functions that move a thread from a goroutine's stack to its own and run a call there
/// (`systemstack`, `morestack`, and `asmcgocall` to call C): above them, the goroutine goes on
/// where `g.sched` says. `mcall` is not one: it leaves the goroutine for good, for the
/// scheduler. (`asmcgocall` called on the thread's own stack, to start a thread, moves nothing;
/// there, the frames between it and the `systemstack` that left the goroutine are passed over.)
const SWITCH_STACKS: [&[u8]; 3] = [b"runtime.systemstack", b"runtime.morestack", b"runtime.asmcgocall"];

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
        // thread's own), its caller is there, unless the sample was taken in it: on the stack
        // of the goroutine it left, if the kernel copied it. A call from C back into Go
        // (`cgocallback`) is a caller of its own kind: on the goroutine's stack, it opens a
        // frame the size of its frame on the thread's, under the address the goroutine left
        // for C at, so that its frame is stepped as any other, back into the goroutine's calls
        // (as Go's own tracebacks are; the C frames between are on the thread's stack).
        let from_c = depth > 0 && table.is_named(function, CALL_FROM_C);
        if depth > 0 && table.writes_sp(function) && !from_c {
            let switches = SWITCH_STACKS.iter().any(|name| table.is_named(function, name));
            return match switches.then(|| self.resume_left_goroutine(is_code)).flatten() {
                Some(caller) => RuntimeStep::Switched(caller),
                None => RuntimeStep::OtherStack,
            };
        }
        let svma = pc.wrapping_sub(self.bias);
        let caller = match table.sp_offset(function, svma, &mut self.work) {
            Some(offset) => {
                let own_copy = self.left.stack();
                caller(regs, offset, own_copy.as_ref().unwrap_or(stack), is_code)
            }
            None => Err(Unread::Lost),
        };
        match caller {
            // The goroutine left for C at `systemstack_switch` (asmcgocall saves it there, as
            // 1.26 and 1.27 do); where it is not (1.19's is what the goroutine saved last, in
            // `mcall`), the call into C is not known and the stack ends.
            Ok(caller)
                if from_c
                    && !self
                        .function_at(depth + 1, caller.ip())
                        .is_some_and(|function| self.binary.table.is_named(function, LEFT_STACK)) =>
            {
                RuntimeStep::OtherStack
            }
            Ok(caller) => RuntimeStep::Caller(caller),
            Err(Unread::PastCopy) => RuntimeStep::OtherStack,
            Err(Unread::Lost) => {
                self.lost += 1;
                RuntimeStep::Lost
            }
        }
    }
}

/// Why a frame's caller could not be read.
enum Unread {
    /// Its stack goes on past what was copied of it.
    PastCopy,
    Lost,
}

/// The caller of a frame whose registers are `regs`, on `stack`, where the frame ends `offset`
/// bytes above its stack pointer: its return address there, its frame pointer just below.
fn caller(
    regs: &UnwindRegsX86_64,
    offset: u64,
    stack: &StackSnapshot<'_>,
    is_code: &mut dyn FnMut(u64) -> bool,
) -> Result<UnwindRegsX86_64, Unread> {
    let read = |at: u64| match stack.read_u64(at) {
        Some(word) => Ok(word),
        None if stack.truncated && at >= stack.end() => Err(Unread::PastCopy),
        None => Err(Unread::Lost),
    };
    let at = regs.sp().checked_add(offset).ok_or(Unread::Lost)?;
    let return_address = read(at)?;
    let bp = match offset {
        0 => regs.bp(),
        _ => read(at.checked_sub(8).ok_or(Unread::Lost)?)?,
    };
    let caller_sp = at.checked_add(8).ok_or(Unread::Lost)?;
    match is_code(return_address) {
        true => Ok(UnwindRegsX86_64::new(return_address, caller_sp, bp)),
        false => Err(Unread::Lost),
    }
}

impl GoProcess {
    /// The registers the goroutine the thread left goes on with, once, if the sample carries its
    /// stack: where it stopped, or, where that is in the function that left it (Go 1.15's
    /// `asmcgocall` saves its own PC) or `systemstack_switch` (a PC `systemstack` and later
    /// releases' `asmcgocall` save, which no call left), its caller.
    fn resume_left_goroutine(&mut self, is_code: &mut dyn FnMut(u64) -> bool) -> Option<UnwindRegsX86_64> {
        let sched = self.left.resume()?;
        let function = self.function_at(0, sched.ip())?;
        let table = &self.binary.table;
        let left_in = |name: &&[u8]| table.is_named(function, name);
        if !(left_in(&LEFT_STACK) || SWITCH_STACKS.iter().any(left_in)) {
            return Some(sched);
        }
        let offset = table.sp_offset(function, sched.ip().wrapping_sub(self.bias), &mut self.work)?;
        caller(&sched, offset, &self.left.stack()?, is_code).ok()
    }
}
