//! CPython 3.8 to 3.13: finding the interpreter in a process, telling the kernel where its
//! frames are, naming the frames it sends, and putting them in place of the eval loop's native
//! frames.
//!
//! A process is looked at when it is first sampled, and again every so often until it maps an
//! interpreter (a `python` executable with the interpreter linked in, or a `libpython`). The
//! kernel is then told where `_PyRuntime` and `PyCode_Type` are and the version's offsets
//! ([`PythonProcess`]), and walks each sample's Python frames. Each frame it sends names a code
//! object by address; the code object is read from `/proc/PID/mem` when the sample is walked,
//! soon after it was taken, and cached per process by (address, first line): an address that
//! now holds another code object (the first was freed) does not match and is not misnamed.
pub mod code;
mod debug_offsets;
mod interpreter;
pub mod layout;
#[cfg(test)]
mod layout_check;
pub mod line_table;
mod merge;

use std::{collections::BTreeMap, sync::Arc};

use profiler_common::{
    MAX_PYTHON_FRAMES, PYTHON_PROCESSES_MAX, PYTHON_USER_SHARE, PythonFrame, PythonProcess, PythonWalk,
    python_frame_flags,
};
use rustc_hash::FxHashMap;

use self::{
    code::CodeObject,
    interpreter::{Image, Interpreter},
};
use crate::{
    address_space::{Backing, ModuleId, ProcessView},
    decode::SampleRecord,
    frame::Frame,
    model::Tgid,
    runtimes::{
        functions::{FunctionRef, Functions, Kind},
        memory::{self, Allowance, ProcessMemory},
    },
    untrusted::Cache,
};

/// How often a process that maps no interpreter yet is looked at again.
const RECHECK_NS: u64 = 200_000_000;
/// Files of a process looked at for an interpreter at most, at each look.
const MAX_CANDIDATES: usize = 16;
/// What a frame or a code object that could not be read holds in a cache, about.
const ENTRY_BYTES: u64 = 64;
/// Processes whose unsupported Python the summary names.
const MAX_UNSUPPORTED_NAMED: usize = 16;

/// The Python stage of the walk.
pub struct Python {
    images: FxHashMap<ModuleId, Option<Arc<Interpreter>>>,
    processes: FxHashMap<Tgid, State>,
    registrations: Vec<(Tgid, Option<PythonProcess>)>,
    table: KernelTable,
    /// What a sample's frames may cost in reads of a process's memory.
    allowance: Arc<Allowance>,
    stats: PythonStats,
    /// Scratch: one sample's frames, and its runs' bounds.
    translated: Vec<Frame>,
    run_ends: Vec<usize>,
    native: Vec<Frame>,
}

enum State {
    /// No interpreter mapped when last looked at, or no room for it in the kernel's table.
    Native {
        checked_ns: u64,
    },
    /// An interpreter this profiler does not read.
    Unsupported,
    Running(Box<Running>),
}

/// A process running a CPython that is read.
struct Running {
    /// Its user, whose share of the kernel's table it holds.
    uid: Option<u32>,
    interpreter: Arc<Interpreter>,
    module: ModuleId,
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
pub struct PythonStats {
    /// Samples with Python frames.
    pub with_frames: u64,
    /// Samples of a thread the interpreter does not know (not started by it, or not yet).
    pub no_thread_state: u64,
    /// Samples whose walk stopped at a failed read (their frames up to it are kept).
    pub read_errors: u64,
    /// Samples deeper than the kernel walks (their outermost frames left out).
    pub truncated: u64,
    /// Frames whose code object could not be read, or had been replaced, by the time it was.
    pub unreadable_code: u64,
    /// Frames whose code object was not read in their sample for want of its allowance of
    /// reads (read at a later one).
    pub deferred: u64,
    /// Processes whose CPython is not read, and what it is.
    pub unsupported: BTreeMap<Tgid, String>,
    /// Looks at a process running a CPython that found no room for it in the kernel's table of
    /// Python processes: it was full, or (system-wide) its user held its share.
    pub no_room: u64,
    pub over_share: u64,
}

impl PythonStats {
    /// The run summary's lines: nothing when no Python process was met.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let missed = self.no_thread_state + self.read_errors + self.truncated;
        if self.with_frames + missed > 0 {
            lines.push(format!(
                "{} samples with Python frames; {} of threads without a Python thread state, {} cut by a failed read, \
                 {} deeper than {MAX_PYTHON_FRAMES} frames; {} frames of code freed before it was read",
                self.with_frames, self.no_thread_state, self.read_errors, self.truncated, self.unreadable_code
            ));
        }
        if self.deferred > 0 {
            lines.push(memory::spent_line(self.deferred, "Python", "the process's memory"));
        }
        if self.no_room + self.over_share > 0 {
            lines.push(format!(
                "Python processes turned away {} times by the kernel's table of them ({PYTHON_PROCESSES_MAX} \
                 processes) being full, {} times by their user holding its share ({PYTHON_USER_SHARE}, \
                 system-wide): native frames only until there is room",
                self.no_room, self.over_share
            ));
        }
        lines.extend(
            self.unsupported.iter().map(|(tgid, what)| format!("pid {tgid}: {what}: native frames only")),
        );
        lines
    }
}

/// The kernel's table of Python processes, as filled from here: at most
/// [`PYTHON_PROCESSES_MAX`], and, when the whole system is followed, at most
/// [`PYTHON_USER_SHARE`] of one user's, so that no user's processes take every place.
#[derive(Default)]
struct KernelTable {
    shared: bool,
    held: u32,
    by_user: FxHashMap<u32, u32>,
}

/// Why a process found no place in the table.
enum NoPlace {
    Full,
    OverShare,
}

impl KernelTable {
    /// Takes a place for a process of `uid` (`None`: not known, which counts as root's).
    fn take(&mut self, uid: Option<u32>) -> Result<(), NoPlace> {
        if self.held >= PYTHON_PROCESSES_MAX {
            return Err(NoPlace::Full);
        }
        let held = self.by_user.entry(uid.unwrap_or(0)).or_default();
        if self.shared && *held >= PYTHON_USER_SHARE {
            return Err(NoPlace::OverShare);
        }
        *held += 1;
        self.held += 1;
        Ok(())
    }

    fn give_back(&mut self, uid: Option<u32>) {
        let uid = uid.unwrap_or(0);
        if let Some(held) = self.by_user.get_mut(&uid) {
            *held -= 1;
            self.held -= 1;
            if *held == 0 {
                self.by_user.remove(&uid);
            }
        }
    }
}

impl Python {
    /// The stage, for a session that follows the whole system (`system_wide`: users share the
    /// kernel's table) or some processes, its frames' reads within `allowance`.
    pub fn new(system_wide: bool, allowance: Arc<Allowance>) -> Self {
        Self {
            images: FxHashMap::default(),
            processes: FxHashMap::default(),
            registrations: Vec::new(),
            table: KernelTable { shared: system_wide, ..KernelTable::default() },
            allowance,
            stats: PythonStats::default(),
            translated: Vec::new(),
            run_ends: Vec::new(),
            native: Vec::new(),
        }
    }

    pub fn stats(&self) -> &PythonStats {
        &self.stats
    }

    /// What the kernel should be told since the last call: processes whose Python frames it
    /// should walk, and those it should not any more.
    pub fn take_registrations(&mut self) -> Vec<(Tgid, Option<PythonProcess>)> {
        std::mem::take(&mut self.registrations)
    }

    /// Forgets a process gone, or that ran exec.
    pub fn forget(&mut self, tgid: Tgid) {
        if let Some(State::Running(running)) = self.processes.remove(&tgid) {
            self.table.give_back(running.uid);
            self.registrations.push((tgid, None));
        }
    }

    /// The kernel would not take the registration of `tgid` (`why`): its frames are not read
    /// (for as long as it runs this interpreter).
    pub fn refused_by_kernel(&mut self, tgid: Tgid, why: &anyhow::Error) {
        // A process forgotten since is another's pid by now.
        let Some(state @ State::Running(_)) = self.processes.get_mut(&tgid) else { return };
        if let State::Running(running) = std::mem::replace(state, State::Unsupported) {
            self.table.give_back(running.uid);
        }
        if self.stats.unsupported.len() < MAX_UNSUPPORTED_NAMED {
            self.stats.unsupported.insert(tgid, format!("the kernel refused its Python frames ({why:#})"));
        }
    }

    /// Looks for an interpreter in the process of `view` if it is time to.
    pub fn observe(&mut self, view: &mut ProcessView<'_>, time_ns: u64) {
        let tgid = view.tgid();
        match self.processes.get(&tgid) {
            Some(State::Native { checked_ns }) if time_ns < checked_ns.saturating_add(RECHECK_NS) => return,
            Some(State::Unsupported | State::Running(_)) => return,
            _ => {}
        }
        let state = self.discover(view).unwrap_or(State::Native { checked_ns: time_ns });
        self.processes.insert(tgid, state);
    }

    /// Looks for the interpreter among the process's executable mappings of files named like
    /// `python` (a `python3.N` with the interpreter linked in, or a `libpython3.N.so`): the
    /// first [`MAX_CANDIDATES`] such files, each once, however many the process maps.
    fn discover(&mut self, view: &mut ProcessView<'_>) -> Option<State> {
        let mut files = rustc_hash::FxHashSet::default();
        let candidates: Vec<_> = view
            .mappings()
            .filter(|mapping| {
                mapping.executable
                    && match &mapping.backing {
                        Backing::File { path, .. } => path
                            .file_name()
                            .and_then(|name| name.to_str())
                            .is_some_and(|name| name.contains("python")),
                        _ => false,
                    }
            })
            .filter(|mapping| files.insert((mapping.dev, mapping.inode)))
            .take(MAX_CANDIDATES)
            .cloned()
            .collect();
        for mapping in candidates {
            let Some(module) = view.intern(&mapping) else { continue };
            let interpreter = match self.images.get(&module) {
                Some(known) => known.clone(),
                None => {
                    let read = read_image(view, module);
                    let tgid = view.tgid();
                    let interpreter = match read {
                        Image::Supported(interpreter) => Some(Arc::new(interpreter)),
                        Image::Unsupported(what) => {
                            if self.stats.unsupported.len() < MAX_UNSUPPORTED_NAMED {
                                self.stats.unsupported.insert(tgid, what);
                            }
                            self.images.insert(module, None);
                            return Some(State::Unsupported);
                        }
                        Image::NotPython => None,
                    };
                    self.images.insert(module, interpreter.clone());
                    interpreter
                }
            };
            let Some(interpreter) = interpreter else { continue };
            let facts = view.module(module).facts()?;
            let bias =
                interpreter::load_bias(facts, mapping.start, mapping.offset, mapping.end - mapping.start)?;
            let uid = view.identity().user;
            match self.table.take(uid) {
                Ok(()) => return Some(self.start(view.tgid(), uid, interpreter, module, bias)),
                // Looked at again later, when there may be room.
                Err(NoPlace::Full) => self.stats.no_room += 1,
                Err(NoPlace::OverShare) => self.stats.over_share += 1,
            }
            return None;
        }
        None
    }

    /// Whether `module` is the interpreter of a process read now (its eval-loop frames are
    /// recognized by their module).
    pub fn interpreter_in_use(&self, module: ModuleId) -> bool {
        self.processes
            .values()
            .any(|state| matches!(state, State::Running(running) if running.module == module))
    }

    /// Once per epoch of the budget of what targets describe: the processes' caches give room
    /// back if it was short.
    pub fn relieve(&mut self) {
        for state in self.processes.values_mut() {
            if let State::Running(running) = state {
                running.relieve();
            }
        }
    }

    /// Forgets what was found of `modules` (evicted), none of them an interpreter in use.
    pub fn forget_modules(&mut self, modules: &[ModuleId]) {
        for module in modules {
            self.images.remove(module);
        }
    }

    fn start(
        &mut self,
        tgid: Tgid,
        uid: Option<u32>,
        interpreter: Arc<Interpreter>,
        module: ModuleId,
        bias: u64,
    ) -> State {
        let process = PythonProcess {
            runtime: interpreter.runtime_svma.wrapping_add(bias),
            code_type: interpreter.code_type_svma.wrapping_add(bias),
            offsets: interpreter.layout.kernel,
        };
        self.registrations.push((tgid, Some(process)));
        let types = code::Types {
            code: process.code_type,
            unicode: interpreter.unicode_type_svma.wrapping_add(bias),
        };
        State::Running(Box::new(Running {
            uid,
            interpreter,
            module,
            types,
            memory: ProcessMemory::new(tgid, self.allowance.clone()),
            codes: Cache::default(),
            frames: Cache::default(),
            line_tables: code::LineTables::default(),
        }))
    }

    /// Puts the Python frames of `sample` in place of the eval loop's frames in `frames` (the
    /// sample's stack, walked and pinned to modules, innermost first).
    pub fn merge_into(
        &mut self,
        sample: &SampleRecord<'_>,
        frames: &mut Vec<Frame>,
        functions: &mut Functions,
    ) {
        let walk = sample.python_walk();
        match walk {
            PythonWalk::NotPython => return,
            PythonWalk::NoThreadState => self.stats.no_thread_state += 1,
            PythonWalk::ReadError => self.stats.read_errors += 1,
            PythonWalk::Truncated => self.stats.truncated += 1,
            PythonWalk::Complete => {}
        }
        let Some(State::Running(running)) = self.processes.get_mut(&sample.tgid()) else { return };
        if sample.python_frames().len() == 0 {
            return;
        }
        self.stats.with_frames += 1;
        let Self { stats, translated, run_ends, native, .. } = self;
        translated.clear();
        run_ends.clear();
        for record in sample.python_frames() {
            if record.code != 0 {
                translated.push(running.frame(&record, functions, stats));
            }
            if record.flags & python_frame_flags::RUN_END != 0 {
                run_ends.push(translated.len());
            }
        }
        if run_ends.last() != Some(&translated.len()) {
            run_ends.push(translated.len());
        }
        let runs: Vec<&[Frame]> = run_ends
            .iter()
            .scan(0, |start, &end| {
                let run = &translated[*start..end];
                *start = end;
                Some(run)
            })
            .collect();
        native.clear();
        native.append(frames);
        let (module, eval_loop) = (running.module, &running.interpreter.eval_loop);
        let is_eval_loop = |frame: &Frame| match *frame {
            Frame::Module { module: m, offset } => {
                m == module && eval_loop.iter().any(|r| r.contains(&offset))
            }
            _ => false,
        };
        merge::merge(native, &runs, is_eval_loop, frames);
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
                let layout = self.interpreter.layout;
                let offset = code::instruction_offset(layout, record.code, record.instr);
                let line = code.object.line(offset).unwrap_or(code.object.first_line);
                (Frame::Runtime { function: code.function.id, line }, code.function)
            }
            None if self.memory.allowance_spent() => {
                // Read at a later sample: not remembered.
                stats.deferred += 1;
                let function = functions.intern("[Python code not read yet]", "", Kind::Python);
                return Frame::Runtime { function: function.id, line: 0 };
            }
            None => {
                stats.unreadable_code += 1;
                let function = functions.intern("[unknown Python code]", "", Kind::Python);
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
        let layout = self.interpreter.layout;
        let code =
            code::read(&mut read, layout, &self.types, record.code, record.first_line, &mut self.line_tables)
                .ok()
                .map(|object| Code {
                    function: functions.intern(&object.name, &object.file, Kind::Python),
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

fn read_image(view: &ProcessView<'_>, module: ModuleId) -> Image {
    let module = view.module(module);
    let (Some(image), Some(facts)) = (module.image(), module.facts()) else { return Image::NotPython };
    Image::read(module.name(), &image, facts)
}
