//! Go, from outside the process, with no flags: its binaries, stripped or not, unwound and named
//! from Go's own table of its functions ([`table`]).
//!
//! Go writes no CFI (`.eh_frame`), and a stripped binary (`-ldflags=-s -w`) has no symbols and
//! no DWARF either; but every Go binary keeps the table its runtime walks its own stacks with.
//! Its table is read once per file, in place, by discovery's worker. The unwinder hands every
//! frame of the binary to [`GoProcess`] ([`stack`]), which steps Go's functions by the stack
//! offset the table gives at their PC and leaves the rest (the C code of a cgo binary, which
//! has CFI) to the unwinder. Each frame stepped is then named from the table: its function, file
//! and line, cached per PC.
//!
//! The labels of the goroutine a sampled thread runs ([`labels`]) are read by the kernel, at
//! sample time, where the binary's release says they are; and, when the thread left the
//! goroutine's stack for its own (to run C code, or the runtime's work), the goroutine's stack,
//! on which its frames are stepped on ([`goroutine`]).
mod binary;
#[cfg(any(test, feature = "testing"))]
pub mod fixture;
mod goroutine;
mod labels;
mod stack;
pub(crate) mod table;
#[cfg(test)]
mod tests;

use std::{ops::Range, sync::Arc};

use anyhow::Result;
use memmap2::Mmap;

use profiler_common::runtimes::{
    ProcessRecord, RuntimeKind, RuntimeProcess, RuntimeWalk,
    go::{GoProcess as KernelRecord, MAX_GO_LABELS},
};

use self::{
    goroutine::{Carried, LeftGoroutine},
    table::{GoTable, Version, Work},
};
use super::{
    ImageFile, Mark, Refusal, Runtime,
    functions::{FunctionRef, Functions},
    memory::Allowance,
};
use crate::{
    address_space::{Mapping, ModuleId, ProcessView},
    decode::{RuntimeFrames, UserRegs},
    frame::{Frame, lookup_address},
    model::{LabelSet, SymbolKind},
    untrusted::{Cache, DESCRIBED},
    unwind::RuntimeCode,
};

/// What its functions' frames say they are.
const LANGUAGE: &str = "Go";

/// What a PC's name holds in the cache, about: key, value and the cache's links.
const ENTRY_BYTES: u64 = 64;

/// Runs of the table's value tables one stack's frames may decode, stepped and named: about a
/// millisecond (a real stack of 50 Go frames decodes a few hundred; names are cached per PC).
const RUNS_PER_STACK: usize = 1 << 18;

/// Go, as a [`Runtime`]: what became of Go's frames.
#[derive(Default)]
pub(crate) struct Go {
    stats: Stats,
}

/// What became of Go's frames and labels, for the run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Stats {
    /// Frames named from the table.
    frames: u64,
    /// Samples of a goroutine with labels, and of those, the ones with more than were read.
    labelled: u64,
    labels_cut: u64,
    /// Samples whose goroutine could not be read.
    labels_unread: u64,
    /// Frames of Go's code its table could not step, and stacks whose frames could not all be
    /// stepped and named for want of work left, in processes let go.
    lost: u64,
    cut: u64,
    /// Samples of threads that had left a goroutine's stack for their own, and of those, the
    /// ones whose goroutine's stack could not be read, and those whose copy could not hold it.
    left: u64,
    left_unread: u64,
    left_cut: u64,
}

/// A Go binary: its table of functions, read in place from its file, and where the kernel finds
/// its goroutines (or why it cannot).
pub(crate) struct Binary {
    table: GoTable<Mmap>,
    goroutines: Result<KernelRecord, String>,
}

impl Binary {
    fn new(table: GoTable<Mmap>) -> Self {
        let placement = table.placement();
        let goroutines = labels::kernel_record(placement.minor_release(), placement.tls_bytes);
        Self { table, goroutines }
    }

    /// What it is: Go's release (or the layout of its table), and what is read of it.
    fn describe(&self) -> String {
        let table = &self.table;
        let release = match (table.placement().release.as_deref(), table.version()) {
            (Some(release), _) => release.to_owned(),
            (None, Version::Go12) => "Go 1.2-1.15".to_owned(),
            (None, Version::Go116) => "Go 1.16-1.17".to_owned(),
            (None, Version::Go118) => "Go 1.18-1.19".to_owned(),
            (None, Version::Go120) => "Go 1.20 or later".to_owned(),
        };
        let inlined = match table.reads_inlined() {
            true => "with its inlined calls",
            false => "without its inlined calls (where its functions' data is was not found)",
        };
        let labels = match &self.goroutines {
            Ok(_) => "goroutine labels read, and goroutines' stacks their threads left for C".to_owned(),
            Err(why) => {
                format!("goroutine labels not read, nor goroutines' stacks their threads left ({why})")
            }
        };
        format!("{release}: its table of {} functions read, {inlined}; {labels}", table.functions())
    }
}

/// A process running a Go binary.
pub(crate) struct GoProcess {
    binary: Arc<Binary>,
    module: ModuleId,
    /// What the binary's addresses (SVMAs) are moved by in the process.
    bias: u64,
    /// Where its Go functions are in the process.
    text: Range<u64>,
    /// Frames by the SVMA they were named at: the functions inlined there, innermost first, then
    /// the function, each with its line.
    names: Cache<u64, Vec<(FunctionRef, u32)>>,
    /// What the stack being walked may still cost.
    work: Work,
    /// The stack of the goroutine the thread of the stack being walked left, if it did.
    left: LeftGoroutine,
    /// Frames of its code its table could not step, and stacks cut short for want of work.
    lost: u64,
    cut: u64,
}

impl GoProcess {
    /// Pushes the frames (innermost first) of the native frame at `depth`, at `addr`, whoever
    /// stepped it (frames pointers may have, past a signal handler's frame): false when it is not
    /// in Go's code, or its function could not be named.
    fn push_frames(
        &mut self,
        depth: usize,
        addr: u64,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
    ) -> bool {
        if !self.text.contains(&addr) {
            return false;
        }
        let svma = lookup_svma(depth, addr, self.bias);
        let before = frames.len();
        if let Some(named) = self.names.get(&svma) {
            frames.extend(as_frames(named));
            return !named.is_empty();
        }
        let table = &self.binary.table;
        let Some(function) = table.function(svma) else { return false };
        let located = table.located(function, svma, &mut self.work);
        // Named in part for want of work: the native frame stays, unnamed, and nothing is cached.
        if self.work.spent() {
            return false;
        }
        let outermost = located.len().saturating_sub(1);
        let mut bytes = ENTRY_BYTES;
        let named: Vec<(FunctionRef, u32)> = located
            .iter()
            .enumerate()
            .map(|(i, at)| {
                let kind = if i == outermost { SymbolKind::Function } else { SymbolKind::Inlined };
                bytes += (at.name.len() + at.file.len()) as u64;
                let name = String::from_utf8_lossy(at.name);
                (functions.intern(&name, &String::from_utf8_lossy(at.file), 0, kind, Some(LANGUAGE)), at.line)
            })
            .collect();
        frames.extend(as_frames(&named));
        if named.iter().all(|(function, _)| function.is_kept()) {
            self.names.insert(svma, named, bytes);
        }
        frames.len() > before
    }
}

impl Runtime for Go {
    type Image = Binary;
    type Instance = GoProcess;

    const LABEL: &'static str = "go";
    const NAME: &'static str = "Go";
    const KIND: RuntimeKind = RuntimeKind::Go;
    /// A Go binary's table is there from its start: nothing to wait for.
    const RECHECK_NS: u64 = 1_000_000_000;

    /// Every Go binary says which Go built it in a section of its own.
    fn marks(mark: Mark<'_>) -> bool {
        mark == Mark::Section(binary::BUILD_INFO_SECTION.as_bytes())
    }

    fn recognise(file: &ImageFile<'_>) -> Result<Option<Binary>> {
        Ok(GoTable::read(file.map()?)?.map(Binary::new))
    }

    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        binary: &Arc<Binary>,
        module: ModuleId,
        mapping: &Mapping,
        _allowance: &Arc<Allowance>,
    ) -> Result<GoProcess, Refusal> {
        let refused = |why: &str| Refusal::Never(anyhow::anyhow!("{}, but {why}", binary.describe()));
        let Some(text) = binary.table.text() else { return Err(refused("its functions' table ends early")) };
        let facts = view.module(module).facts();
        let Some(bias) = facts
            .and_then(|facts| facts.load_bias(mapping.start, mapping.offset, mapping.end - mapping.start))
        else {
            return Err(Refusal::NotYet(anyhow::anyhow!(
                "{}, but where it is loaded is not known",
                binary.describe()
            )));
        };
        Ok(GoProcess {
            binary: binary.clone(),
            module,
            bias,
            text: text.start.wrapping_add(bias)..text.end.wrapping_add(bias),
            names: Cache::new(&DESCRIBED),
            work: Work::new(RUNS_PER_STACK),
            left: LeftGoroutine::default(),
            lost: 0,
            cut: 0,
        })
    }

    fn kernel_process(&self, process: &GoProcess) -> Option<RuntimeProcess> {
        process.binary.goroutines.as_ref().ok().map(ProcessRecord::to_runtime)
    }

    fn stepper<'a>(
        &'a mut self,
        process: &'a mut GoProcess,
        _time_ns: u64,
        _regs: &UserRegs,
        sample: RuntimeFrames<'_>,
    ) -> Option<&'a mut dyn RuntimeCode> {
        process.cut += u64::from(process.work.spent());
        process.work = Work::new(RUNS_PER_STACK);
        let records = if sample.kind == RuntimeKind::Go { sample.records } else { &[] };
        let carried = process.left.take(records);
        self.stats.left += u64::from(carried != Carried::Nothing);
        self.stats.left_unread += u64::from(carried == Carried::Unread);
        self.stats.left_cut += u64::from(carried == Carried::Cut);
        Some(process)
    }

    fn push_frames(
        &mut self,
        process: &mut GoProcess,
        depth: usize,
        addr: u64,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
    ) -> bool {
        let pushed = process.push_frames(depth, addr, functions, frames);
        self.stats.frames += u64::from(pushed);
        pushed
    }

    fn ends_stack(&mut self, process: &mut GoProcess, depth: usize, addr: u64) -> bool {
        process.function_at(depth, addr).is_some_and(|function| process.is_outermost(function))
    }

    /// Go's frames are stepped and named already: its kernel walker reads labels alone.
    fn merge(
        &mut self,
        _process: &mut GoProcess,
        sample: RuntimeFrames<'_>,
        _frames: &mut Vec<Frame>,
        labels: &mut LabelSet,
        _functions: &mut Functions,
    ) {
        match sample.walk {
            RuntimeWalk::Complete | RuntimeWalk::Truncated => {}
            RuntimeWalk::ReadError => self.stats.labels_unread += 1,
            RuntimeWalk::NotWalked | RuntimeWalk::NotItsThread => return,
        }
        let cut = labels::decode(sample.records, labels);
        self.stats.labelled += u64::from(!labels.is_empty());
        self.stats.labels_cut += u64::from(cut);
    }

    fn pinned_module(&self, process: &GoProcess) -> Option<ModuleId> {
        Some(process.module)
    }

    fn relieve(&mut self, process: &mut GoProcess) {
        process.names.relieve();
    }

    fn inspect(&self, process: &GoProcess) -> String {
        format!(
            "{}; its Go code at {:#x}-{:#x}",
            process.binary.describe(),
            process.text.start,
            process.text.end
        )
    }

    fn detach(&mut self, process: GoProcess) {
        self.stats.lost += process.lost;
        self.stats.cut += process.cut;
    }

    fn describe(&self, running: &mut dyn Iterator<Item = &GoProcess>) -> Vec<String> {
        let (mut lost, mut cut) = (self.stats.lost, self.stats.cut);
        for process in running {
            lost += process.lost;
            cut += process.cut;
        }
        let Stats { frames, labelled, labels_cut, labels_unread, left, left_unread, left_cut, .. } =
            self.stats;
        if frames + lost + cut + labelled + labels_unread == 0 {
            return Vec::new();
        }
        let mut lines = vec![format!(
            "{frames} Go frames named from their binaries' tables; {lost} frames of Go's code not stepped by them, \
             {cut} stacks cut short by the work their tables made"
        )];
        if left > 0 {
            lines.push(format!(
                "{left} samples of threads on their own stack for a goroutine (its C code, the runtime's work), with \
                 the goroutine's stack copied ({left_unread} could not be; {left_cut} cut by the size of a stack copy)"
            ));
        }
        if labelled + labels_unread > 0 {
            lines.push(format!(
                "{labelled} samples of goroutines with labels ({labels_cut} with more than {MAX_GO_LABELS}: the \
                 first {MAX_GO_LABELS} kept), {labels_unread} samples whose goroutine could not be read"
            ));
        }
        lines
    }
}

/// The frames of functions named at a PC, innermost first.
fn as_frames(named: &[(FunctionRef, u32)]) -> impl Iterator<Item = Frame> + '_ {
    named.iter().map(|(function, line)| Frame::Runtime { function: function.id, line: *line })
}

/// The SVMA a frame's function and line are looked up at: its return address less one for a
/// caller's (the call, not what follows it), as Go's own tracebacks do.
fn lookup_svma(depth: usize, addr: u64, bias: u64) -> u64 {
    lookup_address(depth, addr).wrapping_sub(bias)
}
