//! HotSpot, the JVM, from outside the process, with no options asked of it.
//!
//! `libjvm.so` exports tables for external tools (the Serviceability Agent's `gHotSpotVMStructs`
//! and the others: every field offset, type size and constant a walker of Java frames needs),
//! read from the live process ([`vm_structs`]) into the [`layout`] the walk uses. Java frames are
//! on the native stack the kernel copies: the unwinder hands every frame in the JVM's code cache
//! to [`Jvm`] ([`stack`]), which finds its code blob ([`code_cache`]) and steps it by HotSpot's
//! own rules (compiled frames by their size, interpreted ones by their frame pointer, the call
//! stub back into `libjvm.so`), and names it: a compiled frame by its nmethod's scopes (one
//! Java frame per inlined method, [`debug_info`]), an interpreted one by the `Method*` and
//! bytecode pointer in its frame ([`method`]). Everything is read through `/proc/PID/mem` soon
//! after the sample, checked, and cached per JVM: an nmethod by its address and compile id (code
//! freed and reused since is another compile id, never misnamed), a method by its address.
//! See docs/hotspot-layouts.md for the layouts and rules.
pub(crate) mod code_cache;
pub(crate) mod debug_info;
#[cfg(any(test, feature = "testing"))]
pub mod fixture;
pub(crate) mod layout;
pub(crate) mod method;
mod stack;
pub(crate) mod vm_structs;

use std::{ops::Range, sync::Arc};

use anyhow::{Context as _, Result, bail};
use profiler_common::runtimes::UserRegister;
use rustc_hash::FxHashMap;

pub(crate) use self::stack::Physical;
use self::{
    code_cache::{Blob, BlobKind, Heap},
    layout::Layout,
    method::MethodInfo,
    vm_structs::{Image, TableCounts, VmStructs},
};
use super::{
    ImageFile, Mark, Refusal, Runtime,
    functions::{FunctionRef, Functions},
    memory::{self, Allowance, Memory, ProcessMemory, ReadMemory, read_bytes, read_u32, read_u64},
};
use crate::{
    address_space::{Mapping, ModuleId, ProcessView},
    decode::{RuntimeFrames, UserRegs},
    frame::Frame,
    model::{SymbolKind, Tgid},
    untrusted::{Cache, ElfFacts},
    unwind::RuntimeCode,
};

/// Blob names' kinds remembered per JVM (16 bytes each); beyond, the memory starts over.
const MAX_BLOB_NAMES: usize = 4096;
/// What its methods' frames say they are.
const LANGUAGE: &str = "Java";
/// What a method's function or one not read holds in a cache, about.
const ENTRY_BYTES: u64 = 64;
/// How long a method read is trusted before its `ConstMethod` is checked again (a class
/// unloaded and its memory reused would be another method at the same address).
const METHOD_RECHECK_NS: u64 = 1_000_000_000;
/// How often the code heaps may be read again, for code in a part committed since.
const HEAPS_REREAD_NS: u64 = 100_000_000;
/// Most bytes of an nmethod's debug information read (PcDescs, scopes and metadata together).
const MAX_DEBUG_INFO: u64 = 1 << 20;
/// Frames of one stack past which compiled frames are not expanded into their inlined methods.
const MAX_STACK_FRAMES: usize = 4 * crate::unwind::MAX_FRAMES;

/// HotSpot, as a [`Runtime`]: what became of Java frames.
#[derive(Default)]
pub(crate) struct HotSpot {
    stats: JavaStats,
}

/// What became of Java frames, for the run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JavaStats {
    /// Java frames named, those whose method could not be read, and those not read in their
    /// sample for want of its allowance of reads (read at a later one).
    pub frames: u64,
    pub unreadable: u64,
    pub deferred: u64,
    /// Frames in a code cache the walk could not step (no blob there, or a blob that failed its
    /// checks) in JVMs let go: stepped as code without CFI instead.
    pub lost: u64,
}

/// A `libjvm.so`: its tables' symbols, and its bytes (where blob names are).
pub(crate) struct LibJvm {
    image: Image,
    file: memmap2::Mmap,
    /// Where its segments are, for its load bias.
    facts: ElfFacts,
}

impl Runtime for HotSpot {
    type Image = LibJvm;
    type Instance = Jvm;

    const LABEL: &'static str = "java";
    const NAME: &'static str = "HotSpot JVM";
    /// Often: the JVM runs Java code (its own start-up) as soon as it has started.
    const RECHECK_NS: u64 = 20_000_000;

    /// `libjvm.so` defines the tables HotSpot exports for external tools.
    fn marks(mark: Mark<'_>) -> bool {
        mark == Mark::Symbol(b"gHotSpotVMStructs")
    }

    fn recognise(file: &ImageFile<'_>) -> Result<Option<LibJvm>> {
        let bytes = file.map().context("HotSpot JVM not read: cannot read its libjvm.so")?;
        LibJvm::read(bytes, file.facts.clone()).map(Some)
    }

    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        libjvm: &Arc<LibJvm>,
        _module: ModuleId,
        mapping: &Mapping,
        allowance: &Arc<Allowance>,
    ) -> Result<Jvm, Refusal> {
        read(view.tgid(), view.identity().user, mapping, libjvm.clone(), allowance.clone()).map_err(
            |refusal| match refusal {
                Refusal::NotYet(why) => Refusal::NotYet(why.context("HotSpot JVM not read")),
                Refusal::Never(why) => Refusal::Never(why.context("HotSpot JVM not read")),
            },
        )
    }

    fn stepper<'a>(
        &'a mut self,
        jvm: &'a mut Jvm,
        time_ns: u64,
        regs: &UserRegs,
        _sample: RuntimeFrames<'_>,
    ) -> Option<&'a mut dyn RuntimeCode> {
        jvm.begin_stack(time_ns, regs.register(UserRegister::R13));
        Some(jvm)
    }

    /// The Java frames of the frame at `depth` of the stack `jvm` last stepped (none when it
    /// stepped no frame there).
    fn push_frames(
        &mut self,
        jvm: &mut Jvm,
        depth: usize,
        _addr: u64,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
    ) -> bool {
        // A stack of Java frames, each standing for up to 64 inlined ones, stops growing here.
        if frames.len() >= MAX_STACK_FRAMES {
            return false;
        }
        let Some(physical) = jvm.stepped(depth) else { return false };
        let before = frames.len();
        jvm.java_frames(physical, functions, frames, &mut self.stats);
        frames.len() > before
    }

    fn relieve(&mut self, jvm: &mut Jvm) {
        jvm.relieve();
    }

    fn inspect(&self, jvm: &Jvm) -> String {
        let TableCounts { fields, types, constants } = jvm.tables;
        format!(
            "its tables for external tools read: {fields} fields, {types} types, {constants} constants; code cache \
             {:#x}-{:#x}",
            jvm.code_cache.start, jvm.code_cache.end
        )
    }

    fn detach(&mut self, jvm: Jvm) {
        self.stats.lost += jvm.lost;
    }

    fn describe(&self, running: &mut dyn Iterator<Item = &Jvm>) -> Vec<String> {
        let stats = &self.stats;
        let lost = stats.lost + running.map(|jvm| jvm.lost).sum::<u64>();
        let mut lines = Vec::new();
        if stats.frames + lost > 0 {
            lines.push(format!(
                "{} Java frames; {} of methods that could not be read; {lost} frames of the code cache not stepped by its rules",
                stats.frames, stats.unreadable
            ));
        }
        if stats.deferred > 0 {
            lines.push(memory::spent_line(stats.deferred, "Java", "the JVM's memory"));
        }
        lines
    }
}

impl LibJvm {
    fn read(file: memmap2::Mmap, facts: ElfFacts) -> Result<Self> {
        let image =
            Image::read(&file).context("HotSpot JVM not read: libjvm.so exports none of HotSpot's tables")?;
        Ok(Self { image, file, facts })
    }
}

/// A JVM found in a process: its layout, its code cache, and what was read of it.
pub struct Jvm {
    /// How many fields, types and constants its tables had.
    pub tables: TableCounts,
    pub layout: Layout,
    /// `CodeCache::_low_bound .. _high_bound`: where compiled Java code and stubs are.
    pub code_cache: Range<u64>,
    heaps: Vec<Heap>,
    call_stub_return: u64,
    /// Blob names (`CodeBlob::_name`, strings of `libjvm.so`) by address, as kinds.
    kinds: FxHashMap<u64, BlobKind>,
    /// The functions of stubs, likewise (0: the call stub).
    stub_functions: Cache<u64, FunctionRef>,
    names: Option<BlobNames>,
    memory: Memory,
    /// What a sample's frames may cost in reads of `memory`.
    allowance: Arc<Allowance>,
    /// What is read of the JVM's metadata, under the budget of what targets describe:
    /// nmethods' debug information by (address, compile id), methods by address (with when
    /// each was read or checked), and the function each method is under each kind of frame.
    nmethods: Cache<(u64, u32), Option<Arc<Nmethod>>>,
    methods: Cache<u64, (Option<Arc<MethodInfo>>, u64)>,
    method_functions: Cache<(u64, SymbolKind), FunctionRef>,
    /// The time of the sample being walked, its r13, and when the heaps were last read.
    now_ns: u64,
    innermost_r13: u64,
    heaps_read_ns: u64,
    /// The frames the last stack walked stepped, by depth.
    stepped: Vec<(usize, Physical)>,
    /// The blobs the last stack's frames were found in: each is read once a stack (the frames of
    /// a recursion share theirs), so stepping spends few of the sample's reads.
    blobs: Vec<Blob>,
    /// Frames in the code cache that could not be stepped.
    lost: u64,
}

/// Where blob names are: strings of `libjvm.so`'s read-only data, read from the file.
struct BlobNames {
    libjvm: Arc<LibJvm>,
    bias: u64,
}

/// What is read of a JVM once it has started: its code cache and the call stub's return.
struct Started {
    code_cache: Range<u64>,
    heaps: Vec<Heap>,
    call_stub_return: u64,
}

/// What an nmethod says of its pcs.
struct Nmethod {
    code_begin: u64,
    method: u64,
    descs: Vec<debug_info::PcDesc>,
    scopes: Vec<u8>,
    metadata: Vec<u64>,
}

impl Nmethod {
    /// About the bytes it holds.
    fn size(&self) -> usize {
        64 + 8 * self.descs.len() + self.scopes.len() + 8 * self.metadata.len()
    }
}

/// Reads the JVM of `pid` (of `user`) whose `libjvm.so` is mapped at `mapping`. Its tables are
/// read whole; its frames, later, within `allowance`.
fn read(
    pid: Tgid,
    user: Option<u32>,
    mapping: &Mapping,
    libjvm: Arc<LibJvm>,
    allowance: Arc<Allowance>,
) -> Result<Jvm, Refusal> {
    let bias = libjvm
        .facts
        .load_bias(mapping.start, mapping.offset, mapping.end - mapping.start)
        .context("where its libjvm.so is loaded is not known")
        .map_err(Refusal::NotYet)?;
    let (image, file) = (&libjvm.image, &libjvm.file);
    // What it reads is noted in the sample's file mappings (shared), as a sample's reads are.
    let mut memory = ProcessMemory::new(pid, user, Allowance::unbounded(allowance.files()));
    let mut read = |addr: u64, buf: &mut [u8]| memory.read(addr, buf);
    let tables = match VmStructs::read(image, file, bias, &mut read) {
        Ok(tables) => tables,
        Err(vm_structs::Refusal::NotReady) => {
            return Err(Refusal::NotYet(vm_structs::Refusal::NotReady.into()));
        }
        Err(refusal) => return Err(Refusal::Never(refusal.into())),
    };
    // The version tells how its compressed numbers are written, which nothing else says.
    let major = tables
        .static_address("Abstract_VM_Version", "_vm_major_version")
        .and_then(|address| read_u32(&mut read, address))
        .filter(|major| (8..1000).contains(major))
        .context("its major version cannot be read")
        .map_err(Refusal::Never)?;
    let layout = Layout::new(&tables, major).map_err(Refusal::Never)?;
    let started = (|| -> Result<_> {
        let mut word = |address: u64, what: &str| {
            read_u64(&mut read, address).with_context(|| format!("cannot read {what} at {address:#x}"))
        };
        let code_cache = word(layout.low_bound, "CodeCache::_low_bound")?
            ..word(layout.high_bound, "CodeCache::_high_bound")?;
        let call_stub_return =
            word(layout.call_stub_return_address, "StubRoutines::_call_stub_return_address")?;
        if code_cache.is_empty() || call_stub_return == 0 {
            bail!("no code cache yet (the JVM is starting)");
        }
        let heaps = code_cache::read_heaps(&layout, &mut read).context("its code heaps cannot be read")?;
        if heaps.iter().any(|heap| heap.code.start < code_cache.start || heap.code.end > code_cache.end) {
            bail!("a code heap lies outside the code cache");
        }
        Ok(Started { code_cache, heaps, call_stub_return })
    })();
    let started = started.map_err(Refusal::NotYet)?;
    let names = BlobNames { libjvm: libjvm.clone(), bias };
    let mut memory = ProcessMemory::new(pid, user, allowance.clone());
    let memory = Box::new(move |addr, buf: &mut [u8]| memory.read(addr, buf));
    Ok(Jvm::new(tables.counts(), layout, started, Some(names), memory, allowance))
}

impl Jvm {
    fn new(
        tables: TableCounts,
        layout: Layout,
        started: Started,
        names: Option<BlobNames>,
        memory: Memory,
        allowance: Arc<Allowance>,
    ) -> Self {
        let Started { code_cache, heaps, call_stub_return } = started;
        Self {
            allowance,
            tables,
            layout,
            code_cache,
            heaps,
            call_stub_return,
            kinds: FxHashMap::default(),
            stub_functions: Cache::default(),
            names,
            memory,
            nmethods: Cache::default(),
            methods: Cache::default(),
            method_functions: Cache::default(),
            now_ns: 0,
            innermost_r13: 0,
            heaps_read_ns: 0,
            stepped: Vec::new(),
            blobs: Vec::new(),
            lost: 0,
        }
    }

    /// A new stack, sampled at `time_ns` with r13 holding `r13`.
    fn begin_stack(&mut self, time_ns: u64, r13: u64) {
        self.stepped.clear();
        self.blobs.clear();
        self.now_ns = time_ns;
        self.innermost_r13 = r13;
    }

    /// What the walk stepped at `depth` of the last stack.
    fn stepped(&self, depth: usize) -> Option<Physical> {
        self.stepped.iter().find(|(at, _)| *at == depth).map(|(_, physical)| *physical)
    }

    /// Reads the heaps again (the code cache grows as code is compiled), at most every
    /// [`HEAPS_REREAD_NS`].
    fn reread_heaps(&mut self) {
        if self.now_ns < self.heaps_read_ns.saturating_add(HEAPS_REREAD_NS) {
            return;
        }
        self.heaps_read_ns = self.now_ns;
        let read = &mut *self.memory;
        if let Some(heaps) = code_cache::read_heaps(&self.layout, read) {
            self.heaps = heaps;
        }
    }

    /// The kind of blob named by the string at `name` (an address in `libjvm.so`).
    fn kind(&mut self, name: u64) -> BlobKind {
        if let Some(&kind) = self.kinds.get(&name) {
            return kind;
        }
        let kind = self.name(name).map_or(BlobKind::Stub, |name| BlobKind::of_name(&name));
        if self.kinds.len() >= MAX_BLOB_NAMES {
            self.kinds.clear();
        }
        self.kinds.insert(name, kind);
        kind
    }

    /// The frame of the stub named by the string at `name`, or of the call stub.
    fn stub_frame(&mut self, name: Option<u64>, functions: &mut Functions) -> Frame {
        let key = name.unwrap_or(0);
        let function = match self.stub_functions.get(&key) {
            Some(function) => function.id,
            None => {
                let text = match name {
                    Some(name) => format!("[{}]", self.name(name).as_deref().unwrap_or("unknown stub")),
                    None => "StubRoutines::call_stub".to_owned(),
                };
                let function = functions.intern(&text, "", 0, SymbolKind::Jit, None);
                let id = function.id;
                if function.is_kept() {
                    self.stub_functions.insert(key, function, ENTRY_BYTES);
                }
                id
            }
        };
        Frame::Runtime { function, line: 0 }
    }

    /// The string at `name`, if it is one of `libjvm.so`'s read-only data.
    fn name(&self, name: u64) -> Option<String> {
        let names = self.names.as_ref()?;
        names.libjvm.image.name(&names.libjvm.file, name.wrapping_sub(names.bias))
    }

    /// Pushes the Java frames `physical` stands for, innermost first.
    fn java_frames(
        &mut self,
        physical: Physical,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
        stats: &mut JavaStats,
    ) {
        match physical {
            Physical::Interpreted { method, bcp, saved_bcp } => {
                let frame = self.method_frame(method, SymbolKind::Function, functions, |info| {
                    info.bci(bcp).or_else(|| info.bci(saved_bcp)).map_or(0, |bci| info.line(bci))
                });
                frames.extend(stats.counted(frame, self.allowance.spent()));
            }
            Physical::Native { method } => {
                let frame = self.method_frame(method, SymbolKind::Function, functions, |_| 0);
                frames.extend(stats.counted(frame, self.allowance.spent()));
            }
            Physical::Stub { name } => frames.push(self.stub_frame(Some(name), functions)),
            Physical::CallStub => frames.push(self.stub_frame(None, functions)),
            Physical::Compiled { blob, compile_id, pc, exact } => {
                let Some(nmethod) = self.nmethod(blob, compile_id) else {
                    stats.counted(None, self.allowance.spent());
                    return;
                };
                let offset = i32::try_from(pc.wrapping_sub(nmethod.code_begin)).unwrap_or(i32::MAX);
                let scopes = debug_info::pc_desc(&nmethod.descs, offset, exact)
                    .and_then(|desc| u32::try_from(desc.scope_offset).ok())
                    .map(|at| debug_info::scopes(&nmethod.scopes, at, self.layout.unsigned5_base))
                    .unwrap_or_default();
                if scopes.is_empty() {
                    // No debug information for this pc: the compiled method, with no line.
                    let frame = self.method_frame(nmethod.method, SymbolKind::Jit, functions, |_| 0);
                    frames.extend(stats.counted(frame, self.allowance.spent()));
                    return;
                }
                let outermost = scopes.len() - 1;
                for (i, scope) in scopes.iter().enumerate() {
                    let method = scope
                        .method_index
                        .checked_sub(1)
                        .and_then(|index| nmethod.metadata.get(index as usize).copied())
                        .unwrap_or(0);
                    let kind = if i == outermost { SymbolKind::Jit } else { SymbolKind::Inlined };
                    let frame = self.method_frame(method, kind, functions, |info| info.line(scope.bci));
                    frames.extend(stats.counted(frame, self.allowance.spent()));
                }
            }
        }
    }

    /// The frame of `method` as `kind`, at the line `line` finds.
    fn method_frame(
        &mut self,
        method: u64,
        kind: SymbolKind,
        functions: &mut Functions,
        line: impl FnOnce(&MethodInfo) -> u32,
    ) -> Option<Frame> {
        let info = self.method(method)?;
        let function = match self.method_functions.get(&(method, kind)) {
            Some(function) => function.id,
            None => {
                let function = functions.intern(&info.name, &info.file, 0, kind, Some(LANGUAGE));
                let id = function.id;
                if function.is_kept() {
                    self.method_functions.insert((method, kind), function, ENTRY_BYTES);
                }
                id
            }
        };
        Some(Frame::Runtime { function, line: line(&info) })
    }

    /// The method at `method`, read once and checked again every [`METHOD_RECHECK_NS`].
    fn method(&mut self, method: u64) -> Option<Arc<MethodInfo>> {
        if let Some((known, checked_ns)) = self.methods.get(&method) {
            if self.now_ns < checked_ns.saturating_add(METHOD_RECHECK_NS) {
                return known.clone();
            }
            let known = known.clone();
            if let Some(info) = &known
                && self.const_method_of(method) == Some(info.const_method)
            {
                self.methods.insert(method, (known.clone(), self.now_ns), method_bytes(&known));
                return known;
            }
            for kind in [SymbolKind::Function, SymbolKind::Jit, SymbolKind::Inlined] {
                self.method_functions.remove(&(method, kind));
            }
        }
        let read = &mut *self.memory;
        let read = (method != 0).then(|| method::read(&self.layout, method, read)).flatten().map(Arc::new);
        // A read refused for want of the sample's allowance says nothing of the method.
        if read.is_some() || !self.allowance.spent() {
            self.methods.insert(method, (read.clone(), self.now_ns), method_bytes(&read));
        }
        read
    }

    /// The `ConstMethod` the method at `method` points to now.
    fn const_method_of(&mut self, method: u64) -> Option<u64> {
        let at = method.checked_add(self.layout.method_const_method.offset as u64)?;
        read_u64(&mut *self.memory, at)
    }

    /// Lets its caches give room back when the budget was short (see [`Cache::relieve`]).
    fn relieve(&mut self) {
        self.stub_functions.relieve();
        self.nmethods.relieve();
        self.methods.relieve();
        self.method_functions.relieve();
    }

    /// The debug information of the nmethod at `blob`, compiled as `compile_id`.
    fn nmethod(&mut self, blob: u64, compile_id: u32) -> Option<Arc<Nmethod>> {
        if let Some(known) = self.nmethods.get(&(blob, compile_id)) {
            return known.clone();
        }
        let read = &mut *self.memory;
        let read = read_nmethod(&self.layout, blob, compile_id, read).map(Arc::new);
        if read.is_some() || !self.allowance.spent() {
            let bytes = read.as_ref().map_or(ENTRY_BYTES, |nmethod| nmethod.size() as u64);
            self.nmethods.insert((blob, compile_id), read.clone(), bytes);
        }
        read
    }
}

/// What a method read (or not) holds in the cache, about.
fn method_bytes(info: &Option<Arc<MethodInfo>>) -> u64 {
    info.as_ref().map_or(ENTRY_BYTES, |info| info.size() as u64)
}

impl JavaStats {
    /// `frame`, counted as named or not (for want of the sample's allowance, when `spent`).
    fn counted(&mut self, frame: Option<Frame>, spent: bool) -> Option<Frame> {
        match (&frame, spent) {
            (Some(_), _) => self.frames += 1,
            (None, true) => self.deferred += 1,
            (None, false) => self.unreadable += 1,
        }
        frame
    }
}

/// Reads the debug information of the nmethod at `blob`: its header again (the compile id must
/// still be `compile_id`), then its PcDescs, scopes and metadata, each in one bounded read.
fn read_nmethod(layout: &Layout, blob: u64, compile_id: u32, read: &mut ReadMemory<'_>) -> Option<Nmethod> {
    let mut header = vec![0u8; layout.nmethod_header];
    if !read(blob, &mut header) || layout.nmethod_compile_id.get(&header)? as u32 != compile_id {
        return None;
    }
    let field = |int: layout::Int| int.get_u64(&header);
    let scopes_pcs = field(layout.nmethod_scopes_pcs_offset)?;
    let code_begin = layout.blob.code(blob, &header)?.start;
    let layout::DebugInfoRanges { descs, scopes, metadata } =
        layout.blob.debug_info(blob, &header, scopes_pcs)?;
    let total = [&descs, &scopes, &metadata]
        .iter()
        .map(|range| range.end.checked_sub(range.start))
        .sum::<Option<u64>>()?;
    if total > MAX_DEBUG_INFO {
        return None;
    }
    let mut bytes = |range: Range<u64>| read_bytes(read, range.start, (range.end - range.start) as usize);
    let descs = debug_info::pc_descs(&bytes(descs)?);
    let scopes = bytes(scopes)?;
    let metadata = bytes(metadata)?.as_chunks::<8>().0.iter().map(|w| u64::from_le_bytes(*w)).collect();
    Some(Nmethod { code_begin, method: field(layout.nmethod_method)?, descs, scopes, metadata })
}

#[cfg(test)]
mod tests;
