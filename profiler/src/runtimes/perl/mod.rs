//! Perl 5.36 to 5.42, threaded as Debian builds it: finding the interpreter in a process, telling
//! the kernel where each thread's interpreter is, naming the frames it sends, and putting them in
//! place of the op loop's native calls.
//!
//! Discovery finds a file that exports `Perl_runops_standard` (Debian's `/usr/bin/perl`, which
//! has the interpreter built in, or a `libperl.so`) and has [`Perl::recognise`] read it
//! ([`image`]). Attaching finds where `PL_current_context` is from the thread pointer; the
//! kernel then walks each sample's context stack. Each frame it sends names a sub and a
//! statement by address, read from `/proc/PID/mem` when the sample is walked and cached per
//! process.
#[cfg(any(test, feature = "testing"))]
pub mod fixture;
mod image;
mod names;

use std::sync::Arc;

use anyhow::anyhow;
use bytemuck::pod_read_unaligned;
use profiler_common::runtimes::{
    ProcessRecord, RuntimeKind, RuntimeProcess, RuntimeWalk,
    perl::{MAX_PERL_FRAMES, PerlFrame, PerlProcess, perl_frame_flags},
};

use self::image::{Image, Interpreter, ThreadContext};
use super::{
    ImageFile, Mark, Refusal, Runtime,
    functions::{FunctionRef, Functions},
    memory::{self, Allowance, ProcessMemory},
    merge::Runs,
};
use crate::{
    address_space::{Mapping, ModuleId, ProcessView},
    decode::RuntimeFrames,
    frame::Frame,
    model::{LabelSet, SymbolKind},
    untrusted::Cache,
};

/// What its subs' frames say they are.
const LANGUAGE: &str = "Perl";

/// What a frame, or a sub's name, holds in a cache besides its strings, about.
const ENTRY_BYTES: u64 = 64;

/// The static TLS area is below the thread pointer, and smaller than this.
const MAX_STATIC_TLS: i64 = 1 << 20;

/// Perl, as a [`Runtime`]: what became of its samples, and one sample's scratch.
#[derive(Default)]
pub(crate) struct Perl {
    stats: PerlStats,
    /// Scratch: one sample's frames, and its runs.
    runs: Runs,
}

/// A process running a Perl interpreter that is read.
pub(crate) struct Running {
    interpreter: Arc<Interpreter>,
    module: ModuleId,
    process: PerlProcess,
    memory: ProcessMemory,
    /// Subs' names by their code's address, and frames by (what, code, statement), under the
    /// budget of what targets describe.
    subs: Cache<u64, Arc<str>>,
    frames: Cache<(FrameKind, u64, u64), (Frame, FunctionRef)>,
}

/// What a frame runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum FrameKind {
    /// A sub or a format.
    Sub,
    /// A `require` of a file.
    Require,
    /// An `eval` (of a block or a string).
    Eval,
    /// The main program's own code.
    Main,
}

/// What became of the samples of Perl processes, for the run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PerlStats {
    with_frames: u64,
    /// Samples of a thread that runs no Perl.
    not_its_thread: u64,
    read_errors: u64,
    truncated: u64,
    /// Frames whose sub or statement could not be read by the time it was.
    unreadable: u64,
    /// Frames left unnamed in their sample for want of its allowance of reads.
    deferred: u64,
}

impl Runtime for Perl {
    type Image = Interpreter;
    type Instance = Running;

    const LABEL: &'static str = "perl";
    const NAME: &'static str = "Perl";
    const KIND: RuntimeKind = RuntimeKind::Perl;
    const RECHECK_NS: u64 = 200_000_000;

    /// The interpreter exports its op loop; XS modules only call into it.
    fn marks(mark: Mark<'_>) -> bool {
        mark == Mark::Symbol(b"Perl_runops_standard")
    }

    fn recognise(file: &ImageFile<'_>) -> anyhow::Result<Option<Interpreter>> {
        match Image::read(file.bytes, file.facts) {
            Image::Supported(interpreter) => Ok(Some(interpreter)),
            Image::Unsupported(what) => Err(anyhow!(what)),
            Image::NotPerl => Ok(None),
        }
    }

    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        interpreter: &Arc<Interpreter>,
        module: ModuleId,
        mapping: &Mapping,
        allowance: &Arc<Allowance>,
    ) -> Result<Running, Refusal> {
        let bias = view
            .module(module)
            .facts()
            .and_then(|facts| facts.load_bias(mapping.start, mapping.offset, mapping.end - mapping.start))
            .ok_or_else(|| Refusal::NotYet(anyhow!("where its interpreter is loaded is not known")))?;
        let mut memory = ProcessMemory::new(view.tgid(), view.identity().user, allowance.clone());
        let interpreter_offset = thread_local_offset(&mut memory, &interpreter.context, bias)?;
        Ok(Running {
            interpreter: interpreter.clone(),
            module,
            process: PerlProcess { interpreter_offset },
            memory,
            subs: Cache::default(),
            frames: Cache::default(),
        })
    }

    fn kernel_process(&self, running: &Running) -> Option<RuntimeProcess> {
        Some(running.process.to_runtime())
    }

    /// Its op loop's frames are recognised by the interpreter's module.
    fn pinned_module(&self, running: &Running) -> Option<ModuleId> {
        Some(running.module)
    }

    fn relieve(&mut self, running: &mut Running) {
        running.subs.relieve();
        running.frames.relieve();
    }

    fn inspect(&self, running: &Running) -> String {
        format!(
            "Perl {} read: PL_current_context at {} from the thread pointer, its threads' context stacks walked at each sample",
            running.interpreter.release, running.process.interpreter_offset
        )
    }

    /// Puts the Perl frames of a sample in place of the op loop's native calls
    /// (`Perl_runops_standard`) in `frames` (the sample's stack, walked and pinned to modules,
    /// innermost first).
    fn merge(
        &mut self,
        running: &mut Running,
        sample: RuntimeFrames<'_>,
        frames: &mut Vec<Frame>,
        _labels: &mut LabelSet,
        functions: &mut Functions,
    ) {
        match sample.walk {
            RuntimeWalk::NotWalked => return,
            RuntimeWalk::NotItsThread => self.stats.not_its_thread += 1,
            RuntimeWalk::ReadError => self.stats.read_errors += 1,
            RuntimeWalk::Truncated => self.stats.truncated += 1,
            RuntimeWalk::Complete => {}
        }
        let records = sample.records.as_chunks::<{ size_of::<PerlFrame>() }>().0;
        if records.is_empty() {
            return;
        }
        self.stats.with_frames += 1;
        let Self { stats, runs } = self;
        runs.clear();
        let records = records.iter().map(|record| pod_read_unaligned::<PerlFrame>(record));
        runs_of(records, |step| match step {
            RunStep::Frame(kind, record) => runs.push(running.frame(kind, &record, functions, stats)),
            RunStep::End => runs.end_run(),
        });
        let (module, interpreter) = (running.module, &running.interpreter);
        let in_perl = |frame: &Frame, code: &dyn Fn(u64) -> bool| match *frame {
            Frame::Module { module: m, offset } => m == module && code(offset),
            _ => false,
        };
        let is_runops = |frame: &Frame| in_perl(frame, &|offset| interpreter.runops.contains(&offset));
        let is_docatch = |frame: &Frame| {
            in_perl(frame, &|offset| interpreter.docatch_calls.iter().any(|call| call.contains(&offset)))
        };
        drop_docatch_loops(frames, is_runops, is_docatch, |frame| in_perl(frame, &|_| true));
        runs.merge_into(frames, is_runops);
    }

    fn describe(&self, _running: &mut dyn Iterator<Item = &Running>) -> Vec<String> {
        let stats = &self.stats;
        let mut lines = Vec::new();
        let missed = stats.read_errors + stats.truncated;
        if stats.with_frames + missed > 0 {
            lines.push(format!(
                "{} samples with Perl frames; {} of threads running no Perl, {} cut by a failed read, {} deeper \
                 than {MAX_PERL_FRAMES} records; {} frames whose sub or statement could not be read",
                stats.with_frames, stats.not_its_thread, stats.read_errors, stats.truncated, stats.unreadable
            ));
        }
        if stats.deferred > 0 {
            lines.push(memory::spent_line(stats.deferred, "Perl", "the process's memory"));
        }
        lines
    }
}

/// Where `PL_current_context` is from a thread's thread pointer, in the process whose interpreter
/// is loaded at `bias`, from what the loader wrote in the GOT: the offset itself for the
/// executable's own variable; for a library's, its module id and the variable's place in its
/// block, which for the first module (a `libperl` the program links, before the C library) is
/// the block nearest the thread pointer.
fn thread_local_offset(
    memory: &mut ProcessMemory,
    context: &ThreadContext,
    bias: u64,
) -> Result<i64, Refusal> {
    let mut word = |addr: u64| {
        let mut bytes = [0u8; 8];
        memory.read(addr, &mut bytes).then(|| u64::from_le_bytes(bytes))
    };
    let not_yet = || Refusal::NotYet(anyhow!("the GOT entry of PL_current_context could not be read"));
    let offset = match *context {
        ThreadContext::Executable { got } => word(got.wrapping_add(bias)).ok_or_else(not_yet)? as i64,
        ThreadContext::Library { got, block_bytes } => {
            let module_id = word(got.wrapping_add(bias)).ok_or_else(not_yet)?;
            let in_block = word(got.wrapping_add(bias).wrapping_add(8)).ok_or_else(not_yet)?;
            if module_id != 1 {
                return Err(Refusal::Never(anyhow!(
                    "libperl's thread-local variables are TLS module {module_id}'s, whose place is not known"
                )));
            }
            in_block.wrapping_sub(block_bytes) as i64
        }
    };
    if !(-MAX_STATIC_TLS..0).contains(&offset) {
        return Err(Refusal::Never(anyhow!(
            "PL_current_context is not in static TLS (at {offset} from the thread pointer)"
        )));
    }
    Ok(offset)
}

/// Takes out of `frames` (innermost first) each call of the op loop from `S_docatch`, with
/// `S_docatch` and the op that called it: such a loop runs the frames of the loop it was entered
/// from, whose run replaces that one, and no context marks it.
fn drop_docatch_loops(
    frames: &mut Vec<Frame>,
    is_runops: impl Fn(&Frame) -> bool,
    is_docatch: impl Fn(&Frame) -> bool,
    in_perl: impl Fn(&Frame) -> bool,
) {
    let mut at = 0;
    while at + 1 < frames.len() {
        if is_runops(&frames[at]) && is_docatch(&frames[at + 1]) {
            let op = frames[at + 2..].iter().take_while(|frame| in_perl(frame) && !is_runops(frame)).count();
            frames.drain(at..at + 2 + op);
        } else {
            at += 1;
        }
    }
}

/// A step of [`runs_of`]: the next frame outwards, or the end of the run of frames one native
/// call of the op loop ran.
#[derive(Debug, PartialEq, Eq)]
enum RunStep {
    Frame(FrameKind, PerlFrame),
    End,
}

/// Hands `step` the frames of a sample's records (innermost first) and where their runs end
/// (docs/perl-layouts.md §5): at the end of every stackinfo (C code pushed it, or started the
/// thread), and after a frame whose return leaves the op loop, unless that is only the end of a
/// `sort` block (the context outer to it is the block's) or the sub a `call_sv` with `G_EVAL`
/// entered (the context outer to it is that call's eval, which leaves the op loop too). The main
/// program's own code is a frame at the end of the thread's first stackinfo, when it started
/// there, not in a sub C code called (an ithread's).
fn runs_of(records: impl Iterator<Item = PerlFrame>, mut step: impl FnMut(RunStep)) {
    let mut returned_to_c = false;
    for record in records {
        if record.flags & perl_frame_flags::SORT_BLOCK != 0 {
            returned_to_c = false;
        } else if record.flags & perl_frame_flags::STACKINFO_END != 0 {
            returned_to_c = false;
            let thread_start = i32::from(record.stackinfo) == PerlProcess::STACKINFO_MAIN;
            if thread_start && !is_frame(record.context) {
                step(RunStep::Frame(FrameKind::Main, record));
            }
            step(RunStep::End);
        } else {
            let kind = frame_kind(&record);
            let eval_of_call = kind == FrameKind::Eval && record.flags & perl_frame_flags::RETURNS_TO_C != 0;
            if returned_to_c && !eval_of_call {
                step(RunStep::End);
            }
            returned_to_c = record.flags & perl_frame_flags::RETURNS_TO_C != 0;
            // A sub's context without its code is one being entered or left (Perl clears it
            // first): the thread runs its caller's call or return.
            if kind != FrameKind::Sub || record.code != 0 {
                step(RunStep::Frame(kind, record));
            }
        }
    }
}

/// Whether a context of type `context` (`cx_type`) is a frame: a sub's, a format's or an eval's.
fn is_frame(context: u16) -> bool {
    let Ok(context) = u8::try_from(context) else { return false };
    matches!(
        context & PerlProcess::CONTEXT_TYPE_MASK,
        PerlProcess::CXT_SUB | PerlProcess::CXT_FORMAT | PerlProcess::CXT_EVAL
    )
}

/// What the frame of `record`, a sub's, format's or eval's context, runs.
fn frame_kind(record: &PerlFrame) -> FrameKind {
    let context = record.context as u8;
    match context & PerlProcess::CONTEXT_TYPE_MASK {
        PerlProcess::CXT_EVAL if record.code != 0 && context & PerlProcess::CXP_EVAL_KINDS == 0 => {
            FrameKind::Require
        }
        PerlProcess::CXT_EVAL => FrameKind::Eval,
        _ => FrameKind::Sub,
    }
}

impl Running {
    /// The frame of `record`, which runs `kind`.
    fn frame(
        &mut self,
        kind: FrameKind,
        record: &PerlFrame,
        functions: &mut Functions,
        stats: &mut PerlStats,
    ) -> Frame {
        let key = (kind, record.code, record.statement);
        if let Some((frame, _)) = self.frames.get(&key) {
            return *frame;
        }
        let name = match kind {
            FrameKind::Sub => self.sub_name(record.code),
            FrameKind::Require => self
                .read(|read| names::string(read, record.code))
                .map(|file| format!("require {file}").into()),
            FrameKind::Eval => Some("(eval)".into()),
            FrameKind::Main => Some("<main>".into()),
        };
        let statement = self.read(|read| names::statement(read, record.statement));
        let (frame, function) = match (name, statement) {
            (Some(name), Some((file, line))) => {
                let function = functions.intern(&name, &file, 0, SymbolKind::Script, Some(LANGUAGE));
                (Frame::Runtime { function: function.id, line }, function)
            }
            _ if self.memory.allowance_spent() => {
                stats.deferred += 1;
                let function =
                    functions.intern("[Perl code not read yet]", "", 0, SymbolKind::Script, Some(LANGUAGE));
                return Frame::Runtime { function: function.id, line: 0 };
            }
            _ => {
                // Not cached: code freed as it was read (an anonymous sub's, a string eval's) may
                // be made anew at the same place.
                stats.unreadable += 1;
                let function =
                    functions.intern("[unknown Perl code]", "", 0, SymbolKind::Script, Some(LANGUAGE));
                return Frame::Runtime { function: function.id, line: 0 };
            }
        };
        if function.is_kept() {
            self.frames.insert(key, (frame, function), ENTRY_BYTES);
        }
        frame
    }

    /// The name of the sub whose code is at `cv`.
    fn sub_name(&mut self, cv: u64) -> Option<Arc<str>> {
        if let Some(known) = self.subs.get(&cv) {
            return Some(known.clone());
        }
        let name: Arc<str> = self.read(|read| names::sub_name(read, cv))?.into();
        self.subs.insert(cv, name.clone(), name.len() as u64 + ENTRY_BYTES);
        Some(name)
    }

    /// What `reading` reads of the process's memory, if it could.
    fn read<T>(&mut self, reading: impl FnOnce(&mut names::Read<'_>) -> anyhow::Result<T>) -> Option<T> {
        let memory = &mut self.memory;
        let mut read = |addr: u64, buf: &mut [u8]| {
            if memory.read(addr, buf) { Ok(()) } else { Err(anyhow!("{addr:#x} could not be read")) }
        };
        reading(&mut read).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u16 = 0x02;
    const SUB: u16 = 0x09;
    const SUB_CALLED: u16 = 0x29;
    const EVAL_BLOCK: u16 = 0x4b;
    const SORT: i16 = 3;
    const MAIN: i16 = 1;

    fn sub(code: u64, context: u16, returns_to_c: bool) -> PerlFrame {
        let flags = if returns_to_c { perl_frame_flags::RETURNS_TO_C } else { 0 };
        PerlFrame { code, statement: code + 1, context, stackinfo: 0, flags }
    }

    fn sort_block() -> PerlFrame {
        PerlFrame { flags: perl_frame_flags::SORT_BLOCK, ..PerlFrame::default() }
    }

    fn stackinfo_end(stackinfo: i16, outermost: u16) -> PerlFrame {
        PerlFrame {
            statement: 0x5,
            context: outermost,
            stackinfo,
            flags: perl_frame_flags::STACKINFO_END,
            code: 0,
        }
    }

    /// The runs as the codes of their frames (0 for the main program's, 1 for an eval's).
    fn runs(records: &[PerlFrame]) -> Vec<Vec<u64>> {
        let mut runs = vec![Vec::new()];
        runs_of(records.iter().copied(), |step| match step {
            RunStep::Frame(FrameKind::Main, _) => runs.last_mut().unwrap().push(0),
            RunStep::Frame(FrameKind::Eval, _) => runs.last_mut().unwrap().push(1),
            RunStep::Frame(_, record) => runs.last_mut().unwrap().push(record.code),
            RunStep::End => runs.push(Vec::new()),
        });
        assert_eq!(runs.pop(), Some(Vec::new()), "the last run ends");
        runs
    }

    #[test]
    fn the_main_program_is_the_outermost_frame_of_its_run() {
        let records =
            [sub(0xb0, SUB_CALLED, false), sub(0xa0, SUB_CALLED, false), stackinfo_end(MAIN, BLOCK)];
        assert_eq!(runs(&records), [vec![0xb0, 0xa0, 0]]);
    }

    #[test]
    fn a_sub_c_code_called_starts_a_run() {
        let records = [
            sub(0xc0, SUB_CALLED, false),
            sub(0xb0, SUB, true),
            sub(0xa0, SUB_CALLED, false),
            stackinfo_end(MAIN, BLOCK),
        ];
        assert_eq!(runs(&records), [vec![0xc0, 0xb0], vec![0xa0, 0]]);
    }

    /// An ithread sorting with a block whose last op calls `cmpf` (docs/perl-layouts.md §6): the
    /// sort's stackinfo is one run, cmpf's return to C only the block's end; the thread's entry
    /// sub and the eval of its `call_sv` are one more, and no main program.
    #[test]
    fn a_sort_block_and_an_ithread_entry_are_one_run_each() {
        let records = [
            sub(0xd0, SUB_CALLED, false),
            sub(0xc0, SUB_CALLED, true),
            sort_block(),
            stackinfo_end(SORT, 0),
            sub(0xb0, SUB_CALLED, true),
            sub(0, EVAL_BLOCK, true),
            stackinfo_end(MAIN, EVAL_BLOCK),
        ];
        assert_eq!(runs(&records), [vec![0xd0, 0xc0], vec![0xb0, 1]]);
    }

    #[test]
    fn a_sub_being_entered_or_left_is_its_caller_s_time() {
        let records = [sub(0, SUB_CALLED, false), sub(0xa0, SUB_CALLED, false), stackinfo_end(MAIN, BLOCK)];
        assert_eq!(runs(&records), [vec![0xa0, 0]]);
    }

    #[test]
    fn a_stackinfo_without_frames_is_a_run_of_none() {
        let records =
            [sort_block(), stackinfo_end(SORT, 0), sub(0xa0, SUB_CALLED, false), stackinfo_end(MAIN, BLOCK)];
        assert_eq!(runs(&records), [vec![], vec![0xa0, 0]]);
    }

    #[test]
    fn a_loop_docatch_entered_is_taken_out_with_it() {
        let native = |addr| Frame::Anonymous { tgid: crate::model::Tgid(1), addr };
        let (leaf, runops, docatch, entertry, sort, main) = (1, 2, 3, 4, 5, 6);
        let mut frames = [leaf, runops, docatch, entertry, runops, sort, runops, main].map(native).to_vec();
        let is = |addr: u64| move |frame: &Frame| *frame == native(addr);
        drop_docatch_loops(&mut frames, is(runops), is(docatch), |frame| *frame != native(main));
        assert_eq!(frames, [leaf, runops, sort, runops, main].map(native));
    }

    #[test]
    fn a_require_names_its_file_and_an_eval_is_an_eval() {
        let require = PerlFrame { code: 0x10, context: 0x0b, ..PerlFrame::default() };
        let string_eval = PerlFrame { code: 0x10, context: 0x2b, ..PerlFrame::default() };
        assert_eq!(frame_kind(&require), FrameKind::Require);
        assert_eq!(frame_kind(&string_eval), FrameKind::Eval);
        assert_eq!(frame_kind(&sub(0x10, 0x0a, false)), FrameKind::Sub, "a format");
    }
}
