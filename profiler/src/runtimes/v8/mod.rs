//! V8 (Node and any embedder whose binary exports V8's `v8dbg_*` debug metadata), from outside
//! the process, with no options asked of it.
//!
//! The binary's metadata (class field offsets, type tags, frame slots: [`image`], [`layout`]) is
//! read once per file. JavaScript frames are on the native stack, each with a frame pointer:
//! the unwinder hands every frame of V8's JIT code (anonymous memory) and of its embedded
//! builtins (the binary's `Builtins_*`, where the interpreter runs) to [`V8Process`], which
//! steps it by its frame pointer and remembers the JavaScript frames among them ([`stack`]).
//! Each is named once the stack is walked: its `JSFunction`'s `SharedFunctionInfo`, checked by
//! its map, gives the function's name and start position and its script's name and source, for
//! the line of that start ([`heap`]). What is read is cached per process by the
//! `SharedFunctionInfo`'s address and checked at each frame against the two fields it was read
//! from (an object moved by the collector and another put in its place reads otherwise, and is
//! read anew).
#[cfg(any(test, feature = "testing"))]
pub mod fixture;
pub(crate) mod heap;
pub(crate) mod image;
pub(crate) mod layout;
mod stack;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use anyhow::Result;

use self::{
    heap::{FunctionInfo, Heap, untag},
    image::Image,
    layout::Layout,
    stack::JsFrame,
};
use super::{
    ImageFile, Mark, Refusal, Runtime,
    functions::{FunctionRef, Functions},
    memory::{self, Allowance, Memory, ProcessMemory},
    ranges::Ranges,
};
use crate::{
    address_space::{Mapping, ModuleId, ProcessView},
    decode::{RuntimeFrames, UserRegs},
    frame::Frame,
    model::SymbolKind,
    untrusted::Cache,
    unwind::RuntimeCode,
};

/// Mappings of its binary a process's V8 is looked for in at most (its text, and its builtins
/// mapped again near its JIT code: a handful); each native frame is looked up in them.
const MAX_MAPPINGS: usize = 64;
/// What its functions' frames say they are.
const LANGUAGE: &str = "JavaScript";

/// What a small entry holds in a cache (a function not read, a map's type, a closure's
/// `SharedFunctionInfo`), about: key, value and the cache's links.
const ENTRY_BYTES: u64 = 64;

/// V8, as a [`Runtime`]: what became of JavaScript frames.
#[derive(Default)]
pub(crate) struct V8 {
    stats: Stats,
}

/// What became of JavaScript frames, for the run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// JavaScript frames named, those whose function could not be read, and those not read in
    /// their sample for want of its allowance of reads.
    pub frames: u64,
    pub unreadable: u64,
    pub deferred: u64,
    /// Frames of V8's code the walk could not step by their frame pointer, in processes let go.
    pub lost: u64,
}

/// A file embedding V8: what it says of V8, and which of its files it is.
pub(crate) struct Binary {
    image: Image,
}

impl Runtime for V8 {
    type Image = Binary;
    type Instance = V8Process;

    const LABEL: &'static str = "javascript";
    const NAME: &'static str = "V8";
    /// Node runs JavaScript of its own as soon as it has started.
    const RECHECK_NS: u64 = 20_000_000;

    /// A binary embedding V8 (`node`, `libnode.so`) defines V8's `v8dbg_*` metadata for
    /// debuggers.
    fn marks(mark: Mark<'_>) -> bool {
        matches!(mark, Mark::Symbol(symbol) if symbol.starts_with(b"v8dbg_"))
    }

    fn recognise(file: &ImageFile<'_>) -> Result<Option<Binary>> {
        Ok(Image::read(file.bytes)?.map(|image| Binary { image }))
    }

    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        binary: &Arc<Binary>,
        module: ModuleId,
        mapping: &Mapping,
        allowance: &Arc<Allowance>,
    ) -> Result<V8Process, Refusal> {
        let image = &binary.image;
        let layout = match &image.layout {
            Ok(layout) => Arc::new(layout.clone()),
            Err(why) => {
                return Err(Refusal::Never(anyhow::anyhow!(
                    "{}: JavaScript frames not read: {why}",
                    image.version
                )));
            }
        };
        // Where the builtins are in the mappings of the binary that map them (V8 may map them
        // twice: where the binary is loaded, and near its JIT code), and every executable
        // mapping of the binary, those first: at most a few, however many times a process maps
        // the file.
        let binary =
            |other: &&Mapping| other.executable && other.dev == mapping.dev && other.inode == mapping.inode;
        let holds_builtins = |other: &&Mapping| {
            other.offset <= image.builtins.start
                && image.builtins.end - other.offset <= other.end - other.start
        };
        let builtins = Ranges::new(
            view.mappings().filter(binary).filter(holds_builtins).map(|other| {
                let start = other.start + (image.builtins.start - other.offset);
                start..start + (image.builtins.end - image.builtins.start)
            }),
            MAX_MAPPINGS,
        );
        let with_builtins = view.mappings().filter(binary).filter(holds_builtins);
        let text = Ranges::new(
            with_builtins.chain(view.mappings().filter(binary)).map(|other| other.start..other.end),
            MAX_MAPPINGS,
        );
        if builtins.is_empty() {
            return Err(Refusal::Never(anyhow::anyhow!(
                "{}: JavaScript frames not read: its embedded builtins are not in its mapped code",
                image.version
            )));
        }
        let mut memory = ProcessMemory::new(view.tgid(), view.identity().user, allowance.clone());
        let memory = Box::new(move |addr, buf: &mut [u8]| memory.read(addr, buf));
        Ok(V8Process::new(layout, module, builtins, text, memory, allowance.clone()))
    }

    fn stepper<'a>(
        &'a mut self,
        process: &'a mut V8Process,
        _time_ns: u64,
        _regs: &UserRegs,
        _sample: RuntimeFrames<'_>,
    ) -> Option<&'a mut dyn RuntimeCode> {
        process.stepped.clear();
        Some(process)
    }

    fn push_frames(
        &mut self,
        process: &mut V8Process,
        depth: usize,
        _addr: u64,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
    ) -> bool {
        let Some(frame) = process.stepped(depth) else { return false };
        match process.name(frame, functions) {
            Naming::Function(frame) => {
                self.stats.frames += 1;
                frames.push(frame);
                true
            }
            Naming::Builtin => false,
            Naming::Unread => {
                if process.allowance.spent() {
                    self.stats.deferred += 1;
                } else {
                    self.stats.unreadable += 1;
                }
                false
            }
        }
    }

    fn pinned_module(&self, process: &V8Process) -> Option<ModuleId> {
        Some(process.module)
    }

    fn relieve(&mut self, process: &mut V8Process) {
        process.functions.relieve();
        process.maps.relieve();
        process.closures.relieve();
    }

    fn inspect(&self, process: &V8Process) -> String {
        let first = process.builtins.iter().next().cloned().unwrap_or_default();
        format!(
            "its v8dbg_* metadata read; its embedded builtins at {:#x}-{:#x} ({} mapping(s))",
            first.start,
            first.end,
            process.builtins.len()
        )
    }

    fn detach(&mut self, process: V8Process) {
        self.stats.lost += process.lost;
    }

    fn describe(&self, running: &mut dyn Iterator<Item = &V8Process>) -> Vec<String> {
        let stats = &self.stats;
        let lost = stats.lost + running.map(|process| process.lost).sum::<u64>();
        let mut lines = Vec::new();
        if stats.frames + stats.unreadable + lost > 0 {
            lines.push(format!(
                "{} JavaScript frames; {} of functions that could not be read; {lost} frames of V8's code not stepped by their frame pointer",
                stats.frames, stats.unreadable
            ));
        }
        if stats.deferred > 0 {
            lines.push(memory::spent_line(stats.deferred, "JavaScript", "V8's heap"));
        }
        lines
    }
}

/// V8 in a process: its layout, where its code is, and what was read of its functions.
pub struct V8Process {
    layout: Arc<Layout>,
    /// Its binary's module, and its builtins' code and its binary's code, as mapped.
    module: ModuleId,
    builtins: Ranges,
    text: Ranges,
    memory: Memory,
    allowance: Arc<Allowance>,
    /// Functions by their `SharedFunctionInfo`'s address, with the name-or-scope-info and
    /// script fields they were read from, under the budget of what targets describe.
    functions: Cache<u64, Entry>,
    /// Maps' instance types by address, under the same budget.
    maps: Cache<u64, u16>,
    /// The `SharedFunctionInfo` last read of each `JSFunction`, by its tagged address, under
    /// the same budget: what names its frames once the process is gone (the last samples of a
    /// process that exits are named after it has, when its memory cannot be read).
    closures: Cache<u64, u64>,
    /// The JavaScript frames the last stack walked stepped, by depth.
    stepped: Vec<(usize, JsFrame)>,
    /// Frames of V8's code that could not be stepped.
    lost: u64,
}

/// A function read (or not), and the fields of its `SharedFunctionInfo` it was read from.
struct Entry {
    fields: (u64, u64),
    read: Read,
}

/// What reading a function found.
enum Read {
    Function(FunctionRef, Arc<FunctionInfo>),
    /// A closure of V8's builtins ([`FunctionInfo::builtin`]).
    Builtin,
    Unreadable,
}

/// What names a JavaScript frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Naming {
    /// Its function, read now or last.
    Function(Frame),
    /// Nothing of its own: its function is a closure of V8's builtins (no script, no name: what
    /// an `await` resumes by, a promise's resolving functions), which the builtin it runs names
    /// better: its native frame stays (`Builtins_AsyncFunctionAwaitResolveClosure`, not
    /// `(anonymous)` of no file).
    Builtin,
    /// Its function could not be read.
    Unread,
}

#[cfg(any(test, feature = "testing"))]
impl Naming {
    /// The frame it is named by, if any.
    pub(crate) fn frame(self) -> Option<Frame> {
        match self {
            Naming::Function(frame) => Some(frame),
            Naming::Builtin | Naming::Unread => None,
        }
    }
}

impl V8Process {
    fn new(
        layout: Arc<Layout>,
        module: ModuleId,
        builtins: Ranges,
        text: Ranges,
        memory: Memory,
        allowance: Arc<Allowance>,
    ) -> Self {
        Self {
            layout,
            module,
            builtins,
            text,
            memory,
            allowance,
            functions: Cache::default(),
            maps: Cache::default(),
            closures: Cache::default(),
            stepped: Vec::new(),
            lost: 0,
        }
    }

    /// The JavaScript frame the walk stepped at `depth` of the last stack.
    fn stepped(&self, depth: usize) -> Option<JsFrame> {
        // Stepped outwards: by depth.
        let index = self.stepped.binary_search_by_key(&depth, |(at, _)| *at).ok()?;
        Some(self.stepped[index].1)
    }

    /// What names `frame`: its function's frame, at its start's line, if it has one.
    fn name(&mut self, frame: JsFrame, functions: &mut Functions) -> Naming {
        self.read_name(frame, functions).unwrap_or(Naming::Unread)
    }

    /// [`Self::name`], `None` when the function cannot be read, now or before.
    fn read_name(&mut self, frame: JsFrame, functions: &mut Functions) -> Option<Naming> {
        let Some((shared, fields)) = self.shared_info(frame.function) else {
            // The process is gone, or the garbage collector moved the function since the sample
            // and something else is there now: what was there when last read named it then.
            return self.last_read(frame);
        };
        if self.closures.get(&frame.function) != Some(&shared) {
            self.closures.insert(frame.function, shared, ENTRY_BYTES);
        }
        if let Some(entry) = self.functions.get(&shared)
            && entry.fields == fields
        {
            return Some(entry.read.naming());
        }
        let layout = self.layout.clone();
        let read = Heap { layout: &layout, read: &mut *self.memory }.function(fields.0, fields.1);
        // A read refused for want of the sample's allowance says nothing of the function.
        if read.is_none() && self.allowance.spent() {
            return None;
        }
        let read = match read {
            Some(info) if info.builtin => Read::Builtin,
            Some(info) => Read::Function(
                functions.intern(&info.name, &info.file, info.column, SymbolKind::Script, Some(LANGUAGE)),
                Arc::new(info),
            ),
            None => Read::Unreadable,
        };
        let naming = read.naming();
        let bytes = match &read {
            Read::Function(function, _) if !function.is_kept() => return Some(naming),
            Read::Function(_, info) => info.size() as u64,
            Read::Builtin | Read::Unreadable => ENTRY_BYTES,
        };
        self.functions.insert(shared, Entry { fields, read }, bytes);
        Some(naming)
    }

    /// The `SharedFunctionInfo` of the `JSFunction` at tagged address `function`, with its
    /// name-or-scope-info and script fields: `None` unless it can be read and is one.
    fn shared_info(&mut self, function: u64) -> Option<(u64, (u64, u64))> {
        let layout = self.layout.clone();
        let mut heap = Heap { layout: &layout, read: &mut *self.memory };
        let shared = untag(heap.word(untag(function)?.checked_add(layout.function_shared)?)?)?;
        let fields_end =
            layout.shared_name_or_scope_info.max(layout.shared_script).max(layout.heap_object_map) + 8;
        let mut header = vec![0u8; fields_end as usize];
        if !(heap.read)(shared, &mut header) {
            return None;
        }
        let word = |offset: u64| {
            let at = offset as usize;
            u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or_default())
        };
        let map = untag(word(layout.heap_object_map))?;
        let kind = match self.maps.get(&map) {
            Some(&kind) => kind,
            None => {
                let kind = heap.map_type(map)?;
                self.maps.insert(map, kind, ENTRY_BYTES);
                kind
            }
        };
        (kind == layout.types.shared_function_info)
            .then(|| (shared, (word(layout.shared_name_or_scope_info), word(layout.shared_script))))
    }

    /// What named `frame`'s function when last read, for a function that cannot be read now.
    fn last_read(&mut self, frame: JsFrame) -> Option<Naming> {
        let shared = *self.closures.get(&frame.function)?;
        Some(self.functions.get(&shared)?.read.naming())
    }
}

impl Read {
    /// What it names frames by.
    fn naming(&self) -> Naming {
        match self {
            Read::Function(function, info) => {
                Naming::Function(Frame::Runtime { function: function.id, line: info.line })
            }
            Read::Builtin => Naming::Builtin,
            Read::Unreadable => Naming::Unread,
        }
    }
}
