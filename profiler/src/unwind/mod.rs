//! DWARF CFI unwinding of user stacks, out of process, on the stack bytes the kernel copied.
//!
//! framehop does the CFI work. Each module is parsed once and placed in one framehop unwinder
//! shared by every process, at a synthetic address of its own (`SYNTHETIC_BASE + (id + 1) <<
//! 36`): a real address is translated to (module, file offset) with the mappings of its process,
//! then to the module's own address (SVMA) with its program headers, then to that synthetic
//! address. The unwinder is stepped one frame at a time so that every step can be checked:
//! the stack pointer must grow, every address must be in executable memory, depth is bounded.
//! Memory reads come from the snapshot only, through [`StackSnapshot`]; where addresses are comes
//! from the process's [`ProcessView`].
pub(crate) mod cfi;
mod eh_return;
pub(crate) mod hybrid;
mod stats;

use std::cell::Cell;

use framehop::{
    Error as StepError, FrameAddress, Module, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};

use rustc_hash::FxHashMap;

pub(crate) use self::stats::UnwindStats;
use self::{
    cfi::ModuleCfi,
    eh_return::{Caller, EhReturnFrame},
};
use crate::{
    address_space::{ModuleId, ProcessView, Resolved, Want},
    decode::UserRegs,
    frame::lookup_address,
};

/// Deepest stack unwound; deeper ones end as [`UnwindEnd::Lost`].
pub const MAX_FRAMES: usize = 1024;
/// Frames room is made for before unwinding.
const FRAMES_RESERVED: usize = 128;

/// Synthetic addresses live above the canonical user range, so they never collide with the
/// real addresses of anonymous memory that framehop is also asked about.
const SYNTHETIC_BASE: u64 = 0x8000_0000_0000_0000;
const MODULE_SPAN_BITS: u32 = 36;

/// The copy of user memory upwards from the stack pointer taken with a sample.
#[derive(Clone, Debug)]
pub struct StackSnapshot<'a> {
    pub sp: u64,
    pub bytes: &'a [u8],
    /// The stack went on past `bytes`.
    pub truncated: bool,
    /// The end of the highest word read (or tried) so far.
    reach: Cell<u64>,
}

impl<'a> StackSnapshot<'a> {
    pub fn new(sp: u64, bytes: &'a [u8], truncated: bool) -> Self {
        Self { sp, bytes, truncated, reach: Cell::new(sp) }
    }

    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        self.reach.set(self.reach.get().max(addr.saturating_add(8)));
        let offset = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let bytes = self.bytes.get(offset..offset.checked_add(8)?)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    /// How far up the stack unwinding read (or tried to): the end of the highest word.
    pub fn reach(&self) -> u64 {
        self.reach.get()
    }

    pub fn end(&self) -> u64 {
        self.sp.saturating_add(self.bytes.len() as u64)
    }
}

/// Why unwinding stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnwindEnd {
    /// The outermost frame was reached (its CFI says so: thread start, `_start`, `clone`).
    Bottom,
    /// The outermost frame of a runtime's own stack was reached (a goroutine's, which a thread
    /// runs among others): complete, but no end of the thread's stack.
    RuntimeBottom,
    /// The stack goes on past the copied bytes (or on another stack, where a runtime moved it).
    SnapshotEnd,
    /// Stopped in code without CFI: a module (or anonymous memory, `None`).
    MissingCfi(Option<ModuleId>),
    /// Stopped on something unusable: garbage on the stack, a non-code address, no progress,
    /// or more than [`MAX_FRAMES`] frames.
    Lost,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unwound {
    /// Real addresses, innermost first: the ip, then return addresses.
    pub frames: Vec<u64>,
    /// Where each frame is (never [`Resolved::Unmapped`]).
    pub locations: Vec<Resolved>,
    pub end: UnwindEnd,
}

/// Code a runtime steps through itself (a JVM's compiled code and interpreter), where there is no
/// CFI and frame pointers mean nothing: the unwinder asks it first about every frame in
/// anonymous memory, and in the modules it says it steps code of.
pub trait RuntimeCode {
    /// Whether it steps code of `module` too (code without CFI of a runtime's own binary:
    /// V8's embedded builtins).
    fn steps_module(&self, _module: ModuleId) -> bool {
        false
    }

    /// The caller of the frame at `depth` (0: innermost) whose registers are `regs`, reading the
    /// stack from `stack` only; `is_code` tells whether an address is code of the process.
    fn step(
        &mut self,
        depth: usize,
        regs: &UnwindRegsX86_64,
        stack: &StackSnapshot<'_>,
        is_code: &mut dyn FnMut(u64) -> bool,
    ) -> RuntimeStep;
}

/// What a [`RuntimeCode`] made of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeStep {
    /// Not its code: the unwinder steps it as usual.
    NotMine,
    /// Its code, whose caller has these registers.
    Caller(UnwindRegsX86_64),
    /// Its code, but the frame could not be stepped: the unwinder tries what it does for code
    /// without CFI.
    Lost,
    /// Its code, where its stacks start (a Go goroutine's first frame): nothing above it.
    Outermost,
    /// Its code, which moved the stack pointer to another stack (Go's `systemstack`, onto the
    /// thread's own): the rest is there, not in the copy.
    OtherStack,
    /// Its code, which moved the stack pointer to another stack, whose copy it has: the caller
    /// has these registers there (anywhere: a stack is not above another), and the runtime
    /// reads that copy itself, stepping every frame of it.
    Switched(UnwindRegsX86_64),
}

/// A [`RuntimeCode`] that owns no code.
pub struct NoRuntime;

impl RuntimeCode for NoRuntime {
    fn step(
        &mut self,
        _: usize,
        _: &UnwindRegsX86_64,
        _: &StackSnapshot<'_>,
        _: &mut dyn FnMut(u64) -> bool,
    ) -> RuntimeStep {
        RuntimeStep::NotMine
    }
}

/// What the unwinder knows of a module: `None` when its file could not be read.
type LoadedModule = Option<ModuleCfi>;

pub struct Unwinder {
    framehop: UnwinderX86_64<Vec<u8>>,
    cache: CacheX86_64,
    modules: FxHashMap<ModuleId, LoadedModule>,
}

impl Default for Unwinder {
    fn default() -> Self {
        Self { framehop: UnwinderX86_64::new(), cache: CacheX86_64::new(), modules: FxHashMap::default() }
    }
}

impl Unwinder {
    /// Lets go of what was read of `modules` (evicted: their ids are never looked up again).
    pub fn forget(&mut self, modules: &[ModuleId]) {
        for module in modules {
            if let Some(Some(cfi)) = self.modules.remove(module) {
                // Where `load` placed it (nothing there when it had no CFI).
                self.framehop.remove_module(synthetic_base(*module) + cfi.svma_range().start);
            }
        }
    }

    pub fn unwind(
        &mut self,
        regs: UserRegs,
        stack: &StackSnapshot<'_>,
        space: &mut ProcessView<'_>,
        runtime: &mut dyn RuntimeCode,
    ) -> Unwound {
        // Room for most stacks at once: grown a frame at a time, a 200-frame stack was copied
        // six times over.
        let mut frames = Vec::with_capacity(FRAMES_RESERVED);
        let mut locations = Vec::with_capacity(FRAMES_RESERVED);
        let mut unwind_regs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut addr = regs.ip;
        // Set when the last step was a guess, in code without CFI (`Some(None)`: anonymous
        // memory): if it leads nowhere, that code is to blame.
        let mut guessed: Option<Option<ModuleId>> = None;
        // A runtime moves to another stack once: a stack pointer that need not grow is allowed
        // once, so that a runtime stepping in circles still ends.
        let mut switched = false;
        let end = loop {
            let location = space.resolve(addr, Want::Code);
            if location == Resolved::Unmapped || frames.len() == MAX_FRAMES {
                break guessed.map_or(UnwindEnd::Lost, UnwindEnd::MissingCfi);
            }
            frames.push(addr);
            locations.push(location);
            let runtime_code = match location {
                Resolved::Anonymous => true,
                Resolved::Module { module, .. } => runtime.steps_module(module),
                _ => false,
            };
            if runtime_code {
                let depth = frames.len() - 1;
                let mut is_code = |addr| is_code(space, addr);
                // A frame the runtime could not step is stepped as any code without CFI (by
                // frame pointers, which a JIT may keep, or as a leaf).
                match runtime.step(depth, &unwind_regs, stack, &mut is_code) {
                    RuntimeStep::Caller(caller) if caller.sp() > unwind_regs.sp() && caller.ip() != 0 => {
                        guessed = None;
                        unwind_regs = caller;
                        addr = caller.ip();
                        continue;
                    }
                    RuntimeStep::Switched(caller) if !switched && caller.ip() != 0 => {
                        switched = true;
                        guessed = None;
                        unwind_regs = caller;
                        addr = caller.ip();
                        continue;
                    }
                    RuntimeStep::Outermost => break UnwindEnd::RuntimeBottom,
                    RuntimeStep::OtherStack | RuntimeStep::Switched(_) => break UnwindEnd::SnapshotEnd,
                    _ => {}
                }
            }
            let (lookup, without_cfi) = match location {
                Resolved::Module { module, file_offset } => {
                    match self.synthetic_address(module, file_offset, space) {
                        Some(synthetic) => (synthetic, None),
                        None => (addr, Some(Some(module))),
                    }
                }
                _ => (addr, Some(None)),
            };
            guessed = without_cfi;
            let eh_return = self.eh_return_frame(addr, location);
            let before = unwind_regs;
            let sp_before = before.sp();
            let (frame, frameless) = if frames.len() == 1 {
                // Code without CFI, innermost: maybe a leaf that set up nothing.
                (FrameAddress::InstructionPointer(lookup), without_cfi.is_some().then_some(0))
            } else {
                // JIT code that called another: maybe one of CPython's perf trampolines.
                let lookup = lookup.try_into().expect("return addresses are nonzero");
                (FrameAddress::ReturnAddress(lookup), (without_cfi == Some(None)).then_some(8))
            };
            let step = self.step(frame, &mut unwind_regs, stack);
            let step = match frameless {
                Some(pushed) => self.or_frameless(step, &mut unwind_regs, before, pushed, stack, space),
                None => step,
            };
            if let Some(frame) = eh_return {
                match self.eh_return_caller(stack, sp_before, frame, space) {
                    Some(caller) => {
                        addr = caller.return_address;
                        unwind_regs.set_sp(caller.cfa);
                        continue;
                    }
                    // Jumping to the landing pad, the CFI describes the landing pad's frame.
                    None if frame.jumping && frames.len() == 1 => break UnwindEnd::Lost,
                    None => {}
                }
            }
            match step {
                Ok(Some(_)) if unwind_regs.sp() <= sp_before => {
                    break without_cfi.map_or(UnwindEnd::Lost, UnwindEnd::MissingCfi);
                }
                Ok(Some(return_address)) if return_address != 0 => addr = return_address,
                Ok(_) => break without_cfi.map_or(UnwindEnd::Bottom, UnwindEnd::MissingCfi),
                Err(StepError::CouldNotReadStack(at)) if stack.truncated && at >= stack.end() => {
                    break UnwindEnd::SnapshotEnd;
                }
                Err(_) => break without_cfi.map_or(UnwindEnd::Lost, UnwindEnd::MissingCfi),
            }
        };
        Unwound { frames, locations, end }
    }

    fn step(
        &mut self,
        frame: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        stack: &StackSnapshot<'_>,
    ) -> Result<Option<u64>, StepError> {
        let mut read = |a| stack.read_u64(a).ok_or(());
        self.framehop.unwind_frame(frame, regs, &mut self.cache, &mut read)
    }

    /// A step framehop made by frame pointers, in code without CFI: kept if it leads up the
    /// stack to code. Otherwise the frame is taken as frameless, `pushed` bytes below its return
    /// address and the frame pointer untouched: 0 for a leaf that set up nothing (JIT stubs,
    /// hand-written assembly), 8 for CPython's perf trampolines (`-X perf`, 3.12 and later:
    /// `sub $8, %rsp; call *%rcx`). JITs that keep frame pointers (the JVM with
    /// `-XX:+PreserveFramePointer`) take the first way.
    fn or_frameless(
        &self,
        step: Result<Option<u64>, StepError>,
        unwind_regs: &mut UnwindRegsX86_64,
        before: UnwindRegsX86_64,
        pushed: u64,
        stack: &StackSnapshot<'_>,
        space: &mut ProcessView<'_>,
    ) -> Result<Option<u64>, StepError> {
        if let Ok(Some(return_address)) = step
            && unwind_regs.sp() > before.sp()
            && is_code(space, return_address)
        {
            return step;
        }
        let Some(at) = before.sp().checked_add(pushed).filter(|at| at.checked_add(8).is_some()) else {
            return step;
        };
        match stack.read_u64(at) {
            Some(return_address) if is_code(space, return_address) => {
                *unwind_regs = UnwindRegsX86_64::new(return_address, at + 8, before.bp());
                Ok(Some(return_address))
            }
            _ => step,
        }
    }

    /// Where the frame at `addr` (resolved as `location`) is when its function returns through
    /// `__builtin_eh_return`, with the function's start as a real address (its module's CFI is
    /// loaded by then).
    fn eh_return_frame(&self, addr: u64, location: Resolved) -> Option<EhReturnFrame> {
        let Resolved::Module { module, file_offset } = location else { return None };
        let cfi = self.modules.get(&module)?.as_ref()?;
        let svma = cfi.svma(file_offset)?;
        let frame = cfi.eh_return_frame(svma)?;
        Some(EhReturnFrame { start: addr.wrapping_sub(svma - frame.start), ..frame })
    }

    /// The real caller of a frame of a function that returns through `__builtin_eh_return`,
    /// from the function's own context on the stack (see [`eh_return`]). A context being
    /// filled in may still hold a return address into the function itself: such a context,
    /// or one whose return address is not code, is passed over.
    fn eh_return_caller(
        &self,
        stack: &StackSnapshot<'_>,
        sp: u64,
        frame: EhReturnFrame,
        space: &mut ProcessView<'_>,
    ) -> Option<Caller> {
        eh_return::own_contexts(stack, sp, frame.start).find(|caller| {
            let call = lookup_address(1, caller.return_address);
            let location = space.resolve(call, Want::Code);
            location != Resolved::Unmapped && self.eh_return_frame(call, location).is_none()
        })
    }

    /// The synthetic address of a module's file offset, or `None` when the module has no CFI.
    fn synthetic_address(
        &mut self,
        module: ModuleId,
        file_offset: u64,
        space: &ProcessView<'_>,
    ) -> Option<u64> {
        let framehop = &mut self.framehop;
        // A module whose loading panics (a parser tripping on a corrupt file) is remembered as
        // having no CFI, not parsed again on every sample.
        let loaded = self.modules.entry(module).or_insert_with(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load(module, space, framehop)))
                .ok()
                .flatten()
        });
        let cfi = loaded.as_ref().filter(|cfi| cfi.has_cfi())?;
        let svma = cfi.svma(file_offset)?;
        (svma < 1 << MODULE_SPAN_BITS).then(|| synthetic_base(module) + svma)
    }
}

/// Whether `addr` is in code of the process.
fn is_code(space: &mut ProcessView<'_>, addr: u64) -> bool {
    space.resolve(addr, Want::Code) != Resolved::Unmapped
}

fn synthetic_base(module: ModuleId) -> u64 {
    SYNTHETIC_BASE + ((u64::from(module.index()) + 1) << MODULE_SPAN_BITS)
}

fn load(module: ModuleId, space: &ProcessView<'_>, framehop: &mut UnwinderX86_64<Vec<u8>>) -> LoadedModule {
    let module_file = space.module(module);
    let debug = module_file.debug_file().map(|debug| &*debug.file);
    let mut cfi = ModuleCfi::load(module_file.file()?, debug).ok()?;
    let range = cfi.svma_range();
    if range.end > 1 << MODULE_SPAN_BITS {
        return None;
    }
    if let Some(sections) = cfi.take_sections() {
        let base = synthetic_base(module);
        let name = module_file.path().to_string_lossy().into_owned();
        framehop.add_module(Module::new(name, base + range.start..base + range.end, base, sections));
    }
    Some(cfi)
}

#[cfg(test)]
mod tests;
