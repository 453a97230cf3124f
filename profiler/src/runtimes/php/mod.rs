//! PHP 8.2 and 8.4 (the Zend Engine, built without thread safety as Debian builds it): finding the
//! engine in a process, telling the kernel where its frames are, naming the frames it sends, and
//! putting them in place of the VM's native frames.
//!
//! Discovery finds a file that exports `executor_globals` (the CLI, PHP-FPM, `libphp`, whatever
//! it is called) and has [`Php::recognise`] read it ([`image`]). The kernel then walks the frames
//! from `executor_globals.current_execute_data` at each sample of the main thread. Each frame it
//! sends names a function by address, read from `/proc/PID/mem` when the sample is walked and
//! cached per process.
mod image;
mod layout;
mod names;

use std::sync::Arc;

use anyhow::anyhow;
use bytemuck::pod_read_unaligned;
use profiler_common::runtimes::{
    ProcessRecord, RuntimeKind, RuntimeProcess, RuntimeWalk, UserRegister,
    php::{MAX_PHP_FRAMES, PhpFrame, PhpProcess, php_frame_flags},
};

use self::{
    image::{Engine, Image},
    names::{FileCode, Function, line, read_function},
};
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
const LANGUAGE: &str = "PHP";

/// What a frame, or a function, holds in a cache besides its strings, about.
const ENTRY_BYTES: u64 = 64;

/// `executor_globals.current_execute_data`, in both releases read.
const CURRENT_EXECUTE_DATA: u64 = 0x1e8;

/// PHP, as a [`Runtime`]: what became of its samples, and one sample's scratch.
#[derive(Default)]
pub(crate) struct Php {
    stats: PhpStats,
    /// Scratch: one sample's frames, and its runs.
    runs: Runs,
}

/// A process running a Zend Engine that is read.
pub(crate) struct Running {
    engine: Arc<Engine>,
    module: ModuleId,
    process: PhpProcess,
    memory: ProcessMemory,
    /// Functions by (address, whether a file's code was the script's), and frames by (function,
    /// op saved, op running, that), under the budget of what targets describe.
    functions: Cache<(u64, bool), Named>,
    frames: Cache<(u64, u64, u64, bool), (Frame, FunctionRef)>,
}

#[derive(Clone)]
struct Named {
    function: FunctionRef,
    read: Arc<Function>,
}

/// What became of the samples of PHP processes, for the run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PhpStats {
    with_frames: u64,
    /// Samples of a thread other than the one running PHP.
    not_its_thread: u64,
    read_errors: u64,
    truncated: u64,
    /// Frames whose function could not be read by the time it was.
    unreadable: u64,
    /// Frames left unnamed in their sample for want of its allowance of reads.
    deferred: u64,
}

impl Runtime for Php {
    type Image = Engine;
    type Instance = Running;

    const LABEL: &'static str = "php";
    const NAME: &'static str = "PHP";
    const KIND: RuntimeKind = RuntimeKind::Php;
    const RECHECK_NS: u64 = 200_000_000;

    /// The engine exports its globals; extensions only refer to them.
    fn marks(mark: Mark<'_>) -> bool {
        mark == Mark::Symbol(b"executor_globals")
    }

    fn recognise(file: &ImageFile<'_>) -> anyhow::Result<Option<Engine>> {
        match Image::read(file.bytes, file.facts) {
            Image::Supported(engine) => Ok(Some(engine)),
            Image::Unsupported(what) => Err(anyhow!(what)),
            Image::NotPhp => Ok(None),
        }
    }

    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        engine: &Arc<Engine>,
        module: ModuleId,
        mapping: &Mapping,
        allowance: &Arc<Allowance>,
    ) -> Result<Running, Refusal> {
        let bias = view
            .module(module)
            .facts()
            .and_then(|facts| facts.load_bias(mapping.start, mapping.offset, mapping.end - mapping.start))
            .ok_or_else(|| Refusal::NotYet(anyhow!("where its engine is loaded is not known")))?;
        let process = PhpProcess {
            current_execute_data: engine
                .executor_globals
                .wrapping_add(bias)
                .wrapping_add(CURRENT_EXECUTE_DATA),
        };
        Ok(Running {
            engine: engine.clone(),
            module,
            process,
            memory: ProcessMemory::new(view.tgid(), view.identity().user, allowance.clone()),
            functions: Cache::default(),
            frames: Cache::default(),
        })
    }

    fn kernel_process(&self, running: &Running) -> Option<RuntimeProcess> {
        Some(running.process.to_runtime())
    }

    /// Its VM's frames are recognised by the engine's module.
    fn pinned_module(&self, running: &Running) -> Option<ModuleId> {
        Some(running.module)
    }

    fn relieve(&mut self, running: &mut Running) {
        running.functions.relieve();
        running.frames.relieve();
    }

    fn inspect(&self, running: &Running) -> String {
        format!(
            "PHP {} read: executor_globals.current_execute_data at {:#x}, its main thread's frames walked at each sample",
            running.engine.release, running.process.current_execute_data
        )
    }

    /// Puts the PHP frames of a sample in place of the VM's native calls (`execute_ex`) in
    /// `frames` (the sample's stack, walked and pinned to modules, innermost first).
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
        let records = sample.records.as_chunks::<{ size_of::<PhpFrame>() }>().0;
        if records.is_empty() {
            return;
        }
        self.stats.with_frames += 1;
        let module = running.module;
        // The VM keeps the op it runs in r15, and saves it to the frame only at calls: while the
        // thread runs the engine's code (the VM, or a helper of its handlers), r15 is the innermost
        // frame's op, when it is one of its function's.
        let in_engine = |frame: &Frame| matches!(*frame, Frame::Module { module: m, .. } if m == module);
        let running_op = sample
            .regs
            .filter(|_| frames.iter().find(|frame| !matches!(frame, Frame::Kernel(_))).is_some_and(in_engine))
            .map(|regs| regs.register(UserRegister::R15));
        let Self { stats, runs } = self;
        runs.clear();
        for (index, record) in records.iter().enumerate() {
            let record = pod_read_unaligned::<PhpFrame>(record);
            let running_op =
                running_op.filter(|_| index == 0 && record.flags & php_frame_flags::INTERNAL == 0);
            runs.push(running.frame(&record, running_op, functions, stats));
            if record.flags & php_frame_flags::RUN_END != 0 {
                runs.end_run();
            }
        }
        let execute_ex = &running.engine.execute_ex;
        let is_vm = |frame: &Frame| match *frame {
            Frame::Module { module: m, offset } => m == module && execute_ex.contains(&offset),
            _ => false,
        };
        runs.merge_into(frames, is_vm);
    }

    fn describe(&self, _running: &mut dyn Iterator<Item = &Running>) -> Vec<String> {
        let stats = &self.stats;
        let mut lines = Vec::new();
        let missed = stats.read_errors + stats.truncated;
        if stats.with_frames + missed > 0 {
            lines.push(format!(
                "{} samples with PHP frames; {} of other threads than the one running PHP, {} cut by a failed read, \
                 {} deeper than {MAX_PHP_FRAMES} frames; {} frames whose function could not be read",
                stats.with_frames, stats.not_its_thread, stats.read_errors, stats.truncated, stats.unreadable
            ));
        }
        if stats.deferred > 0 {
            lines.push(memory::spent_line(stats.deferred, "PHP", "the process's memory"));
        }
        lines
    }
}

impl Running {
    /// The frame a record stands for, at `running_op` when that is an op of its function (the
    /// op the VM runs), else at the op the frame saved.
    fn frame(
        &mut self,
        record: &PhpFrame,
        running_op: Option<u64>,
        functions: &mut Functions,
        stats: &mut PhpStats,
    ) -> Frame {
        // A file's own code is the script's when the VM was entered for it.
        let script = record.flags & php_frame_flags::RUN_END != 0;
        let key = (record.func, record.opline, running_op.unwrap_or(0), script);
        if let Some((frame, _)) = self.frames.get(&key) {
            return *frame;
        }
        let (frame, function) = match self.named(record.func, script, functions) {
            Some(named) => {
                let memory = &mut self.memory;
                let mut read = |addr: u64, buf: &mut [u8]| {
                    if memory.read(addr, buf) { Ok(()) } else { Err(anyhow!("{addr:#x} could not be read")) }
                };
                let line = running_op
                    .and_then(|op| line(&mut read, &named.read, op))
                    .or_else(|| line(&mut read, &named.read, record.opline))
                    .unwrap_or(named.read.first_line);
                (Frame::Runtime { function: named.function.id, line }, named.function)
            }
            None if self.memory.allowance_spent() => {
                stats.deferred += 1;
                let function =
                    functions.intern("[PHP code not read yet]", "", 0, SymbolKind::Script, Some(LANGUAGE));
                return Frame::Runtime { function: function.id, line: 0 };
            }
            None => {
                // Not cached: a request's code is freed at its end, and the next's is often
                // compiled where it was, in the moment this one was read.
                stats.unreadable += 1;
                let function =
                    functions.intern("[unknown PHP code]", "", 0, SymbolKind::Script, Some(LANGUAGE));
                return Frame::Runtime { function: function.id, line: 0 };
            }
        };
        if function.is_kept() {
            self.frames.insert(key, (frame, function), ENTRY_BYTES);
        }
        frame
    }

    /// What the function at `func` names.
    fn named(&mut self, func: u64, script: bool, functions: &mut Functions) -> Option<Named> {
        let key = (func, script);
        if let Some(known) = self.functions.get(&key) {
            return Some(known.clone());
        }
        let memory = &mut self.memory;
        let mut read = |addr: u64, buf: &mut [u8]| {
            if memory.read(addr, buf) { Ok(()) } else { Err(anyhow!("{addr:#x} could not be read")) }
        };
        let file_code = if script { FileCode::Script } else { FileCode::Included };
        let read = read_function(&mut read, self.engine.layout, func, file_code).ok()?;
        let named = Named {
            function: functions.intern(&read.name, &read.file, 0, SymbolKind::Script, Some(LANGUAGE)),
            read: Arc::new(read),
        };
        // What could not be read is read again next time (see `frame`), and a name the budget
        // had no room for is not kept.
        if named.function.is_kept() {
            self.functions.insert(key, named.clone(), named.read.size() as u64 + ENTRY_BYTES);
        }
        Some(named)
    }
}
