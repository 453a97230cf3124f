//! CPython 3.6 to 3.14: finding the interpreter in a process, telling the kernel where its
//! frames are, naming the frames it sends, and putting them in place of the eval loop's native
//! frames.
//!
//! Discovery (`runtimes/discovery`) finds an interpreter among the files a process maps (a file
//! that defines `PyCode_Type`: a `python` executable with the interpreter linked in, or a
//! `libpython`, whatever it is called) and has [`Python::recognise`] read it. The kernel is then
//! told where `_PyRuntime` and `PyCode_Type` are and the version's offsets
//! ([`PythonProcess`]), and walks each sample's Python frames. Each frame it sends names a code
//! object by address; the code object is read from `/proc/PID/mem` when the sample is walked,
//! soon after it was taken, and cached per process by (address, first line): an address that
//! now holds another code object (the first was freed) does not match and is not misnamed.
pub(crate) mod code;
mod debug_offsets;
pub(crate) mod interpreter;
pub(crate) mod layout;
#[cfg(test)]
mod layout_check;
pub(crate) mod line_table;

use std::sync::Arc;

use bytemuck::pod_read_unaligned;
use profiler_common::runtimes::{
    ProcessRecord, RuntimeKind, RuntimeProcess, RuntimeWalk,
    python::{MAX_PYTHON_FRAMES, PythonFrame, PythonProcess, python_frame_flags},
};

use self::{code::CodeObject, interpreter::Interpreter};
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

/// What its functions' frames say they are.
const LANGUAGE: &str = "Python";

/// What a frame or a code object that could not be read holds in a cache, about.
const ENTRY_BYTES: u64 = 64;

/// CPython, as a [`Runtime`]: what became of its samples, and one sample's scratch.
#[derive(Default)]
pub(crate) struct Python {
    stats: PythonStats,
    /// Scratch: one sample's frames, and its runs.
    runs: Runs,
}

/// A process running a CPython that is read.
pub(crate) struct Running {
    interpreter: Arc<Interpreter>,
    module: ModuleId,
    process: PythonProcess,
    types: code::Types,
    memory: ProcessMemory,
    /// Code objects by (address, first line), and frames by (code object, first line,
    /// instruction), under the budget of what targets describe.
    codes: Cache<(u64, u32), Option<Code>>,
    frames: Cache<(u64, u32, u64), (Frame, FunctionRef)>,
    line_tables: code::LineTables,
}

#[derive(Clone)]
struct Code {
    function: FunctionRef,
    object: Arc<CodeObject>,
}

/// What became of the samples of Python processes, for the run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PythonStats {
    /// Samples with Python frames.
    with_frames: u64,
    /// Samples of a thread the interpreter does not know (not started by it, or not yet).
    no_thread_state: u64,
    /// Samples whose walk stopped at a failed read (their frames up to it are kept).
    read_errors: u64,
    /// Samples deeper than the kernel walks (their outermost frames left out).
    truncated: u64,
    /// Frames whose code object could not be read, or had been replaced, by the time it was.
    unreadable_code: u64,
    /// Frames whose code object was not read in their sample for want of its allowance of
    /// reads (read at a later one).
    deferred: u64,
}

impl Runtime for Python {
    type Image = Interpreter;
    type Instance = Running;

    const LABEL: &'static str = "python";
    const NAME: &'static str = "CPython";
    const KIND: RuntimeKind = RuntimeKind::Python;
    const RECHECK_NS: u64 = 200_000_000;

    /// An interpreter (a `python` executable with it linked in, or a `libpython`, whatever it
    /// is called) defines `PyCode_Type`; an extension module only refers to it.
    fn marks(mark: Mark<'_>) -> bool {
        mark == Mark::Symbol(b"PyCode_Type")
    }

    fn recognise(file: &ImageFile<'_>) -> anyhow::Result<Option<Interpreter>> {
        match interpreter::Image::read(file.name, file.bytes, file.facts) {
            interpreter::Image::Supported(interpreter) => Ok(Some(interpreter)),
            interpreter::Image::Unsupported(what) => Err(anyhow::anyhow!(what)),
            interpreter::Image::NotPython => Ok(None),
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
        let facts = view.module(module).facts();
        let bias = facts
            .and_then(|facts| facts.load_bias(mapping.start, mapping.offset, mapping.end - mapping.start))
            .ok_or_else(|| {
                Refusal::NotYet(anyhow::anyhow!("where its interpreter is loaded is not known"))
            })?;
        let process = PythonProcess {
            runtime: interpreter.runtime_svma.wrapping_add(bias),
            code_type: interpreter.code_type_svma.wrapping_add(bias),
            offsets: interpreter.layout.kernel,
        };
        let types = code::Types {
            code: process.code_type,
            unicode: interpreter.unicode_type_svma.wrapping_add(bias),
        };
        Ok(Running {
            interpreter: interpreter.clone(),
            module,
            process,
            types,
            memory: ProcessMemory::new(view.tgid(), view.identity().user, allowance.clone()),
            codes: Cache::default(),
            frames: Cache::default(),
            line_tables: code::LineTables::default(),
        })
    }

    fn kernel_process(&self, running: &Running) -> Option<RuntimeProcess> {
        Some(running.process.to_runtime())
    }

    /// Its eval loop's frames are recognised by the interpreter's module.
    fn pinned_module(&self, running: &Running) -> Option<ModuleId> {
        Some(running.module)
    }

    fn relieve(&mut self, running: &mut Running) {
        running.relieve();
    }

    fn inspect(&self, running: &Running) -> String {
        format!(
            "{} read: _PyRuntime at {:#x}, its threads' frames walked at each sample",
            running.interpreter.layout.version, running.process.runtime
        )
    }

    /// Puts the Python frames of a sample in place of the eval loop's frames in `frames` (the
    /// sample's stack, walked and pinned to modules, innermost first).
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
            RuntimeWalk::NotItsThread => self.stats.no_thread_state += 1,
            RuntimeWalk::ReadError => self.stats.read_errors += 1,
            RuntimeWalk::Truncated => self.stats.truncated += 1,
            RuntimeWalk::Complete => {}
        }
        let records = sample
            .records
            .as_chunks::<{ size_of::<PythonFrame>() }>()
            .0
            .iter()
            .map(|record| pod_read_unaligned::<PythonFrame>(record));
        if records.len() == 0 {
            return;
        }
        self.stats.with_frames += 1;
        let Self { stats, runs } = self;
        runs.clear();
        for record in records {
            if record.code != 0 {
                runs.push(running.frame(&record, functions, stats));
            }
            if record.flags & python_frame_flags::RUN_END != 0 {
                runs.end_run();
            }
        }
        let (module, eval_loop) = (running.module, &running.interpreter.eval_loop);
        let is_eval_loop = |frame: &Frame| match *frame {
            Frame::Module { module: m, offset } => m == module && eval_loop.contains(offset),
            _ => false,
        };
        runs.merge_into(frames, is_eval_loop);
    }

    fn describe(&self, _running: &mut dyn Iterator<Item = &Running>) -> Vec<String> {
        let stats = &self.stats;
        let mut lines = Vec::new();
        let missed = stats.no_thread_state + stats.read_errors + stats.truncated;
        if stats.with_frames + missed > 0 {
            lines.push(format!(
                "{} samples with Python frames; {} of threads without a Python thread state, {} cut by a failed read, \
                 {} deeper than {MAX_PYTHON_FRAMES} frames; {} frames of code freed before it was read",
                stats.with_frames, stats.no_thread_state, stats.read_errors, stats.truncated, stats.unreadable_code
            ));
        }
        if stats.deferred > 0 {
            lines.push(memory::spent_line(stats.deferred, "Python", "the process's memory"));
        }
        lines
    }
}

impl Running {
    /// The frame a record stands for.
    fn frame(&mut self, record: &PythonFrame, functions: &mut Functions, stats: &mut PythonStats) -> Frame {
        let key = (record.code, record.first_line, record.instr);
        if let Some((frame, _)) = self.frames.get(&key) {
            return *frame;
        }
        let (frame, function) = match self.code(record, functions) {
            Some(code) => {
                let layout = &self.interpreter.layout;
                let offset = code::instruction_offset(layout, record.code, record.instr);
                let line = code.object.line(offset).unwrap_or(code.object.first_line);
                (Frame::Runtime { function: code.function.id, line }, code.function)
            }
            None if self.memory.allowance_spent() => {
                // Read at a later sample: not remembered.
                stats.deferred += 1;
                let function =
                    functions.intern("[Python code not read yet]", "", 0, SymbolKind::Script, Some(LANGUAGE));
                return Frame::Runtime { function: function.id, line: 0 };
            }
            None => {
                stats.unreadable_code += 1;
                let function =
                    functions.intern("[unknown Python code]", "", 0, SymbolKind::Script, Some(LANGUAGE));
                (Frame::Runtime { function: function.id, line: 0 }, function)
            }
        };
        if function.is_kept() {
            self.frames.insert(key, (frame, function), ENTRY_BYTES);
        }
        frame
    }

    fn code(&mut self, record: &PythonFrame, functions: &mut Functions) -> Option<Code> {
        let key = (record.code, record.first_line);
        if let Some(known) = self.codes.get(&key) {
            return known.clone();
        }
        let memory = &mut self.memory;
        let mut read = |addr: u64, buf: &mut [u8]| memory.read(addr, buf);
        let layout = &self.interpreter.layout;
        let code =
            code::read(&mut read, layout, &self.types, record.code, record.first_line, &mut self.line_tables)
                .ok()
                .map(|object| Code {
                    function: functions.intern(
                        &object.name,
                        &object.file,
                        0,
                        SymbolKind::Script,
                        Some(LANGUAGE),
                    ),
                    object: Arc::new(object),
                });
        // A read refused for want of the sample's allowance says nothing of the code object, nor
        // does a name the budget had no room for.
        let unkept = code.as_ref().is_some_and(|code| !code.function.is_kept());
        if (code.is_some() || !self.memory.allowance_spent()) && !unkept {
            let bytes = code.as_ref().map_or(0, |code| code.object.size() as u64) + ENTRY_BYTES;
            self.codes.insert(key, code.clone(), bytes);
        }
        code
    }

    /// Lets its caches give room back when the budget was short (see [`Cache::relieve`]).
    fn relieve(&mut self) {
        self.codes.relieve();
        self.frames.relieve();
        self.line_tables.relieve();
    }
}
