//! Naming frames: blazesym for ELF symbols and DWARF (with inlined functions and demangling) in
//! user modules, the kernel itself for kernel frames ([`KernelNamer`]); PLT
//! stubs named after the function they call ([`plt`]); JIT code named by its process's perf map
//! ([`perf_map`]).
//!
//! Modules are symbolized through the handles [`Modules`] keeps open, so a module symbolizes
//! after its process exited or its file was deleted. blazesym caches each parsed file by its
//! identity (device, inode, size, mtime): a library shared by many processes is parsed once.
//! The [`Namer`] names each distinct frame once, as it first appears.
mod dwarf_nesting;
pub mod jitdump;
mod naming_thread;
mod perf_map;
mod plt;

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
};

use blazesym::symbolize::{
    CodeInfo, Input, Symbolized, Symbolizer as BlazeSymbolizer,
    evict::Evict,
    source::{Elf, Source},
};

use rustc_hash::{FxHashMap, FxHashSet};

pub(crate) use self::naming_thread::{Finished, NamingThread};
#[cfg(any(test, feature = "testing"))]
pub use self::perf_map::PerfMap;
pub use self::{perf_map::PerfMaps, plt::PltStubs};
use crate::{
    address_space::{AddressSpaces, Identity, Module, ModuleId, ModuleSet},
    frame::Frame,
    kernel::names::KernelNamer,
    model::{SourceLine, Symbol, SymbolKind, Tgid},
    named::Named,
    runtimes::Runtimes,
    untrusted::{
        Charge, INFLATED_BUDGET, charge_inflated,
        open::{self, readable_path},
    },
};

/// Whose DWARF names native frames: it gives them their inlined functions and source lines, and
/// costs memory for as long as its module is named (libc's separate debug file inflates to about
/// 10 MiB, libpython's DWARF maps about 14).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DebugInfo {
    /// The DWARF a program or library carries itself. Libraries whose DWARF is in a separate debug
    /// file (the system's, from its debug packages) and the interpreters runtimes' frames are read
    /// through (libpython, node) are named from their ELF symbols: the code profiled is rarely
    /// theirs, and for a runtime's program its own frames say where it is.
    #[default]
    Own,
    /// Every module's, from separate debug files too.
    All,
}

impl Named for DebugInfo {
    const NAMES: &'static [(&'static str, Self)] = &[("own", Self::Own), ("all", Self::All)];
}

impl DebugInfo {
    /// Whether `module`'s DWARF is read; `interpreter`: a runtime reads its frames through it.
    fn reads(self, module: &Module, interpreter: bool) -> bool {
        match self {
            Self::All => true,
            Self::Own => !interpreter && module.symbol_file().is_some_and(|file| !file.virtual_addresses),
        }
    }
}

/// The stage that names frames: each distinct frame once, as the recording goes, so that little
/// is left to do when it stops (the end of a recording is when its user waits). It runs on a
/// thread of its own ([`NamingThread`]), fed [`NewFrames`].
pub struct Namer {
    symbolizer: Symbolizer,
    perf_maps: PerfMaps,
    /// The processes anonymous frames were seen in, for reading their perf maps.
    identities: FxHashMap<Tgid, Identity>,
    symbols: Symbols,
    /// Jobs of its thread that failed (a panic), their frames left unnamed.
    failed_jobs: u64,
}

impl Namer {
    /// With `kernel` to name kernel frames (see [`Symbolizer::new`]).
    pub fn new(debug_info: DebugInfo, kernel: anyhow::Result<KernelNamer>) -> Self {
        Self {
            symbolizer: Symbolizer::new(debug_info, kernel),
            perf_maps: PerfMaps::default(),
            identities: FxHashMap::default(),
            symbols: Symbols::default(),
            failed_jobs: 0,
        }
    }

    /// Names `new` frames (frames named already are skipped). The frames of a module named
    /// from its DWARF before a runtime was found reading its frames through it (found off the
    /// drain's thread, after its first samples) are named again, from its symbols.
    pub fn name(&mut self, new: NewFrames) {
        let NewFrames { frames, runtime, modules, interpreters, identities, now_ns } = new;
        self.identities.extend(identities);
        for (frame, symbol) in runtime {
            self.symbols.by_frame.insert(frame, vec![symbol]);
        }
        let renamed = self.symbolizer.now_interpreters(&interpreters, &modules);
        if !renamed.is_empty() {
            let again: Vec<Frame> = self
                .symbols
                .by_frame
                .keys()
                .filter(|frame| matches!(frame, Frame::Module { module, .. } if renamed.contains(module)))
                .copied()
                .collect();
            self.symbols.extend(self.symbolizer.symbolize(&again, &modules, &interpreters, &self.perf_maps));
        }
        let frames: Vec<Frame> = frames.into_iter().filter(|frame| !self.symbols.contains(frame)).collect();
        self.read_perf_maps(&frames, now_ns);
        if !frames.is_empty() {
            self.symbols.extend(self.symbolizer.symbolize(&frames, &modules, &interpreters, &self.perf_maps));
        }
    }

    /// Every name. A JIT may have described its code in its perf map since its first sample
    /// there: anonymous frames still unnamed are tried again.
    pub fn finish(&mut self, now_ns: u64) -> Symbols {
        self.name_unnamed_again(|_| true, now_ns);
        std::mem::take(&mut self.symbols)
    }

    /// Forgets the perf map of a process gone, at `now_ns`. A runtime may write its map as it
    /// exits (the JVM's `-XX:+DumpPerfMapAtExit`), after its frames were first named: the map
    /// is read once more for those still unnamed.
    pub fn forget(&mut self, tgid: Tgid, now_ns: u64) {
        if self.identities.contains_key(&tgid) {
            self.name_unnamed_again(|of| of == tgid, now_ns);
            self.identities.remove(&tgid);
        }
        self.perf_maps.forget(tgid);
    }

    /// Lets go of what was read of `modules` (evicted from the registry): blazesym's parsed
    /// files and the PLT stubs.
    pub fn forget_modules(&mut self, modules: &ModuleSet) {
        self.symbolizer.forget(modules.iter());
    }

    /// What it has to say once done.
    pub fn report(self) -> NamingReport {
        NamingReport {
            refused: [self.perf_maps.into_refused(), self.symbolizer.refused],
            failed_jobs: self.failed_jobs,
        }
    }

    /// Names again the anonymous frames still unnamed of the processes `of` picks, from their
    /// perf maps read anew however recently they were read.
    fn name_unnamed_again(&mut self, of: impl Fn(Tgid) -> bool, now_ns: u64) {
        let unnamed: Vec<Frame> = self
            .symbols
            .unnamed_anonymous()
            .into_iter()
            .filter(|frame| matches!(*frame, Frame::Anonymous { tgid, .. } if of(tgid)))
            .collect();
        if unnamed.is_empty() {
            return;
        }
        let processes: FxHashSet<Tgid> = unnamed
            .iter()
            .filter_map(|frame| match *frame {
                Frame::Anonymous { tgid, .. } => Some(tgid),
                _ => None,
            })
            .collect();
        for tgid in processes {
            if let Some(identity) = self.identities.get(&tgid) {
                self.perf_maps.read_again(tgid, identity, now_ns);
            }
        }
        let names = self.symbolizer.symbolize(
            &unnamed,
            &ModuleSet::default(),
            &FxHashSet::default(),
            &self.perf_maps,
        );
        self.symbols.extend(names);
    }

    fn read_perf_maps(&mut self, frames: &[Frame], now_ns: u64) {
        for frame in frames {
            if let Frame::Anonymous { tgid, addr } = *frame
                && let Some(identity) = self.identities.get(&tgid)
            {
                self.perf_maps.observe(tgid, identity, addr, now_ns);
            }
        }
    }
}

/// What naming has to say at the end of a session.
#[derive(Debug, Default)]
pub struct NamingReport {
    /// What was refused on the way: perf maps that are not their process's own, debug
    /// information nested too deep or malformed.
    pub refused: [Warnings; 2],
    /// Jobs of the naming thread that failed (a panic), their frames left unnamed.
    pub failed_jobs: u64,
}

/// Frames to name, with what naming them reads of the session's state (their modules, their
/// processes' identities), taken along so that naming can run beside the session.
#[derive(Debug, Default)]
pub struct NewFrames {
    frames: Vec<Frame>,
    /// Runtimes' frames, named already from the functions they stand for.
    runtime: Vec<(Frame, Symbol)>,
    modules: ModuleSet,
    /// The modules runtimes read their frames through now (their interpreters), among
    /// `modules`.
    interpreters: FxHashSet<ModuleId>,
    identities: FxHashMap<Tgid, Identity>,
    /// When they were seen: perf maps are read as they were then.
    now_ns: u64,
}

impl NewFrames {
    /// `frames` of processes in `spaces`, seen by `now_ns`; runtimes' frames named by the
    /// functions they stand for.
    pub fn new(frames: Vec<Frame>, spaces: &AddressSpaces, runtimes: &Runtimes, now_ns: u64) -> Self {
        let (runtime_frames, frames): (Vec<Frame>, Vec<Frame>) =
            frames.into_iter().partition(|frame| matches!(frame, Frame::Runtime { .. }));
        let runtime = runtime_frames
            .into_iter()
            .filter_map(|frame| match frame {
                Frame::Runtime { function, line } => {
                    Some((frame, runtimes.functions().symbol(function, line)))
                }
                _ => None,
            })
            .collect();
        let mut modules = FxHashSet::default();
        let mut processes = FxHashSet::default();
        for frame in &frames {
            match *frame {
                Frame::Module { module, .. } => _ = modules.insert(module),
                Frame::Anonymous { tgid, .. } => _ = processes.insert(tgid),
                _ => {}
            }
        }
        let identities =
            processes.into_iter().filter_map(|tgid| Some((tgid, spaces.identity(tgid)?))).collect();
        let interpreters = runtimes.pinned_modules();
        modules.extend(interpreters.iter().copied());
        Self { frames, runtime, modules: spaces.modules().share(modules), interpreters, identities, now_ns }
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.runtime.is_empty()
    }
}

/// The names of frames. A frame has one name, or several when functions were inlined there
/// (outermost first).
#[derive(Debug, Default)]
pub struct Symbols {
    by_frame: HashMap<Frame, Vec<Symbol>>,
}

impl Symbols {
    pub fn of(&self, frame: &Frame) -> &[Symbol] {
        self.by_frame.get(frame).map(Vec::as_slice).unwrap_or_default()
    }

    pub fn contains(&self, frame: &Frame) -> bool {
        self.by_frame.contains_key(frame)
    }

    /// Adds names, replacing those of the same frames.
    pub fn extend(&mut self, other: Symbols) {
        self.by_frame.extend(other.by_frame);
    }

    /// Frames in anonymous memory that no perf map named (yet).
    pub fn unnamed_anonymous(&self) -> Vec<Frame> {
        self.by_frame
            .iter()
            .filter(|(frame, symbols)| {
                matches!(frame, Frame::Anonymous { .. }) && symbols[0].kind != SymbolKind::Jit
            })
            .map(|(frame, _)| *frame)
            .collect()
    }

    #[cfg(test)]
    pub fn insert(&mut self, frame: Frame, symbols: Vec<Symbol>) {
        self.by_frame.insert(frame, symbols);
    }
}

/// Warnings said once each: the first [`Warnings::KEPT`] in full, the rest counted.
#[derive(Debug, Default)]
pub struct Warnings {
    kept: Vec<String>,
    count: usize,
}

impl Warnings {
    const KEPT: usize = 16;

    /// Counts a warning, keeping its text (made by `say`) while few are kept.
    pub fn push(&mut self, say: impl FnOnce() -> String) {
        self.count += 1;
        if self.kept.len() < Self::KEPT {
            self.kept.push(say());
        }
    }

    pub fn kept(&self) -> &[String] {
        &self.kept
    }

    pub fn count(&self) -> usize {
        self.count
    }
}

pub struct Symbolizer {
    blaze: BlazeSymbolizer,
    debug_info: DebugInfo,
    /// What naming each module takes, found at its first frame.
    modules: FxHashMap<ModuleId, ModuleNaming>,
    kernel: KernelNaming,
    /// Debug information not given to blazesym, a line per module; the kernel's names when
    /// they cannot be had.
    refused: Warnings,
}

/// What names kernel frames.
enum KernelNaming {
    Namer(Box<KernelNamer>),
    /// None does, for this reason, to be said at the first kernel frame.
    Unsaid(anyhow::Error),
    /// None does, and why was said.
    Said,
}

impl KernelNaming {
    /// The names of `addrs` (`None`: unknown), and why they are not named when that is still to
    /// be said: once, the first time (after a failure there is no namer).
    fn name(&mut self, addrs: &[u64]) -> (Vec<Option<String>>, Option<anyhow::Error>) {
        let unnamed = match std::mem::replace(self, Self::Said) {
            Self::Namer(mut namer) => match namer.name(addrs) {
                Ok(named) => {
                    *self = Self::Namer(namer);
                    return (named, None);
                }
                Err(why) => Some(why),
            },
            Self::Unsaid(why) => Some(why),
            Self::Said => None,
        };
        (vec![None; addrs.len()], unnamed)
    }
}

/// How a module is named beside blazesym's lookups.
struct ModuleNaming {
    plt: PltStubs,
    /// blazesym may read its DWARF ([`dwarf_access`]).
    dwarf: Option<DwarfAccess>,
    /// blazesym failed (or panicked) on it: named by module and offset from then on.
    failed: bool,
}

impl Symbolizer {
    /// With `kernel` to name kernel frames (its error said at the first one).
    pub fn new(debug_info: DebugInfo, kernel: anyhow::Result<KernelNamer>) -> Self {
        // No debug directories: blazesym is only ever given files that send it nowhere else (see
        // `Module::symbol_file`); finding debug files is the address-space stage's, inside each
        // target's root.
        let blaze = BlazeSymbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(true)
            .set_debug_dirs(Some(Vec::<PathBuf>::new()))
            .build();
        Self {
            blaze,
            debug_info,
            modules: FxHashMap::default(),
            kernel: kernel.map_or_else(KernelNaming::Unsaid, |namer| KernelNaming::Namer(Box::new(namer))),
            refused: Warnings::default(),
        }
    }

    /// Those of `interpreters` (among `modules`) named from their DWARF so far: let go of, to
    /// be named from their symbols from now on.
    fn now_interpreters(&mut self, interpreters: &FxHashSet<ModuleId>, modules: &ModuleSet) -> Vec<ModuleId> {
        let named_from_dwarf =
            |id: &ModuleId| self.modules.get(id).is_some_and(|naming| naming.dwarf.is_some());
        let renamed: Vec<ModuleId> = interpreters.iter().copied().filter(named_from_dwarf).collect();
        if !renamed.is_empty() {
            self.forget(modules.iter().filter(|(id, _)| renamed.contains(id)));
        }
        renamed
    }

    /// Lets go of what was read of `modules`: the naming state (PLT stubs, the DWARF charge)
    /// and blazesym's parsed files.
    fn forget<'a>(&mut self, modules: impl Iterator<Item = (ModuleId, &'a Module)>) {
        for (id, module) in modules {
            self.modules.remove(&id);
            let files = module.file().into_iter().chain(module.debug_file().map(|debug| &*debug.file));
            for file in files {
                let evict = Evict::Elf(blazesym::symbolize::evict::Elf::new(readable_path(file)));
                // Not knowing the file is not an error; nothing else can go wrong here.
                let _ = self.blaze.evict(&evict);
            }
        }
    }

    /// Names every frame in `frames`. Frames that cannot be named get a placeholder that keeps
    /// what is known (`libfoo.so+0x1234`, `[unknown]`); errors never abort symbolization.
    pub fn symbolize(
        &mut self,
        frames: &[Frame],
        modules: &ModuleSet,
        interpreters: &FxHashSet<ModuleId>,
        perf_maps: &PerfMaps,
    ) -> Symbols {
        let mut kernel = Vec::new();
        let mut by_module: BTreeMap<ModuleId, Vec<u64>> = BTreeMap::new();
        let mut symbols = Symbols::default();
        for &frame in frames {
            match frame {
                Frame::Kernel(addr) => kernel.push(addr),
                Frame::Module { module, offset } => by_module.entry(module).or_default().push(offset),
                Frame::Anonymous { tgid, addr } => {
                    let symbol = match perf_maps.name(tgid, addr) {
                        Some(name) => Symbol::new(name, SymbolKind::Jit),
                        None => Symbol::new("[unknown]", SymbolKind::Function),
                    };
                    symbols.by_frame.insert(frame, vec![symbol]);
                }
                Frame::Marker(marker) => {
                    symbols.by_frame.insert(frame, vec![Symbol::new(marker.name(), SymbolKind::Function)]);
                }
                // Named from the runtimes' functions by the Namer, never handed here.
                Frame::Runtime { .. } => {}
            }
        }
        for (addr, names) in kernel.iter().zip(self.kernel(&kernel)) {
            symbols.by_frame.insert(Frame::Kernel(*addr), names);
        }
        for (module, offsets) in by_module {
            let names = self.module(modules, module, interpreters.contains(&module), &offsets);
            for (offset, names) in offsets.into_iter().zip(names) {
                symbols.by_frame.insert(Frame::Module { module, offset }, names);
            }
        }
        symbols
    }

    fn kernel(&mut self, addrs: &[u64]) -> Vec<Vec<Symbol>> {
        /// The name of a kernel address the kernel knows no function at.
        const UNKNOWN_KERNEL: &str = "[unknown kernel]";
        // Nothing to say without kernel frames: a recording of programs in user mode may have none.
        if addrs.is_empty() {
            return Vec::new();
        }
        let (named, unnamed) = self.kernel.name(addrs);
        if let Some(why) = unnamed {
            self.refused.push(|| format!("kernel frames unnamed: {why:#}"));
        }
        named
            .into_iter()
            // Not its address: names reach every output (see `--kernel-addresses`).
            .map(|name| vec![Symbol::new(name.as_deref().unwrap_or(UNKNOWN_KERNEL), SymbolKind::Kernel)])
            .collect()
    }

    fn module(
        &mut self,
        modules: &ModuleSet,
        id: ModuleId,
        interpreter: bool,
        offsets: &[u64],
    ) -> Vec<Vec<Symbol>> {
        let Some(module) = modules.get(id) else {
            // Never so: a batch shares the module of each of its frames.
            return offsets
                .iter()
                .map(|offset| vec![Symbol::new(format!("[unknown]+{offset:#x}"), SymbolKind::Function)])
                .collect();
        };
        let debug_info = self.debug_info;
        let naming = self.modules.entry(id).or_insert_with(|| ModuleNaming {
            plt: plt_stubs(module),
            dwarf: debug_info
                .reads(module, interpreter)
                .then(|| dwarf_access(module, &mut self.refused))
                .flatten(),
            failed: false,
        });
        let resolved = match naming.failed {
            true => Vec::new(),
            false => resolve(&self.blaze, module, offsets, naming.dwarf.is_some()).unwrap_or_else(|| {
                naming.failed = true;
                Vec::new()
            }),
        };
        let plt = &naming.plt;
        offsets
            .iter()
            .enumerate()
            .map(|(i, offset)| match resolved.get(i) {
                _ if let Some(stub) = plt.name(*offset) => vec![Symbol::new(stub, SymbolKind::Function)],
                Some(Symbolized::Sym(sym)) => {
                    let outer =
                        Symbol::new(&*sym.name, SymbolKind::Function).at(source(sym.code_info.as_deref()));
                    let inlined = sym
                        .inlined
                        .iter()
                        .map(|f| Symbol::new(&*f.name, SymbolKind::Inlined).at(source(f.code_info.as_ref())));
                    std::iter::once(outer).chain(inlined).collect()
                }
                _ => vec![Symbol::new(format!("{}+{offset:#x}", module.name()), SymbolKind::Function)],
            })
            .collect()
    }
}

/// The file, line and column of blazesym's code information (with its directory when the
/// DWARF gives one); `None` without a line.
fn source(code_info: Option<&CodeInfo<'_>>) -> Option<SourceLine> {
    let code_info = code_info?;
    Some(SourceLine {
        file: code_info.to_path().to_string_lossy().into_owned(),
        line: code_info.line?,
        column: code_info.column.map_or(0, u32::from),
    })
}

/// Leave for blazesym to read a module's DWARF.
struct DwarfAccess {
    /// What its compressed sections take once inflated, held of the budget for them while
    /// blazesym may keep them.
    _inflated: Option<Charge>,
}

/// Whether blazesym may read the DWARF of `module`'s symbol file: it has some, it nests within
/// what blazesym's recursion takes, and what it inflates to fits the budget for inflated
/// sections. A refusal is warned about, naming the file.
fn dwarf_access(module: &Module, refused: &mut Warnings) -> Option<DwarfAccess> {
    let symbol_file = module.symbol_file().filter(|symbol_file| symbol_file.dwarf)?;
    let inflates_to = symbol_file.inflated_dwarf;
    let mut inflated = None;
    let checked = if inflates_to > 0 && !charge_inflated(&mut inflated, inflates_to) {
        Err(format!(
            "its compressed debug info inflates to {} MiB, more than is left of the {} MiB for inflated sections",
            inflates_to.div_ceil(1 << 20),
            INFLATED_BUDGET >> 20
        ))
    } else {
        match open::map(symbol_file.file) {
            Ok(image) => dwarf_nesting::check(&image).map_err(|refusal| refusal.to_string()),
            Err(_) => Err(dwarf_nesting::Refusal::Malformed.to_string()),
        }
    };
    let Err(refusal) = checked else { return Some(DwarfAccess { _inflated: inflated }) };
    let file = if symbol_file.virtual_addresses { "'s debug file" } else { "" };
    refused.push(|| {
        format!(
            "{}{file}: {refusal}: its frames are named from its ELF symbols only",
            module.path().display()
        )
    });
    None
}

/// blazesym's names for `offsets` of `module`, from the file [`Module::symbol_file`] chooses,
/// with its DWARF when `dwarf`; `None` when it fails or panics.
fn resolve<'a>(
    blaze: &'a BlazeSymbolizer,
    module: &Module,
    offsets: &[u64],
    dwarf: bool,
) -> Option<Vec<Symbolized<'a>>> {
    let symbol_file = module.symbol_file()?;
    let elf = Elf { debug_syms: dwarf, ..Elf::new(readable_path(symbol_file.file)) };
    let source = Source::Elf(elf);
    if !symbol_file.virtual_addresses {
        return contained(|| blaze.symbolize(&source, Input::FileOffset(offsets)).ok());
    }
    // A separate debug file has the module's addresses, not its file offsets.
    let facts = module.facts()?;
    let addresses: Vec<u64> = offsets.iter().map(|&offset| facts.svma(offset).unwrap_or(0)).collect();
    contained(|| blaze.symbolize(&source, Input::VirtOffset(&addresses)).ok())
}

fn plt_stubs(module: &Module) -> PltStubs {
    module.image().map(|image| contained(|| PltStubs::parse(&image))).unwrap_or_default()
}

/// Runs `f`, turning a panic (a parser tripping on a corrupt file) into the default result: the
/// frames keep placeholder names instead of the recording being lost.
fn contained<T: Default>(f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        address_space::{AddressSpaces, Identity, Mapping, Modules, Tracking, Want},
        frame::Marker,
        testing::no_kernel_namer,
    };

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn names_own_function_and_unknowns() {
        let pid = Tgid::own();
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        let mut view = spaces.observe(pid, pid.main_thread(), "test", 0);
        let addr = a_function_to_find as *const () as usize as u64 + 1;
        let frames = [addr, 0x10].map(|addr| Frame::user(pid, 0, addr, view.resolve(addr, Want::Any)));
        let mut namer = Namer::new(DebugInfo::Own, no_kernel_namer());
        namer.name(NewFrames::new(frames.to_vec(), &spaces, &Runtimes::new(false), 0));
        let symbols = namer.finish(0);
        let names = symbols.of(&frames[0]);
        assert!(names[0].name.ends_with("a_function_to_find"), "{names:?}");
        assert_eq!(names[0].kind, SymbolKind::Function);
        assert_eq!(symbols.of(&frames[1]), [Symbol::new("[unknown]", SymbolKind::Function)]);
    }

    #[test]
    fn unreadable_module_keeps_name_and_offset() {
        let mut modules = Modules::default();
        let heap = Mapping::pseudo("[heap]", 0x1000, 0x3000);
        let module = modules.intern(Tgid(1), &Identity::own(), &heap).unwrap();
        let frame = Frame::Module { module, offset: 0x123 };
        let names = Symbolizer::new(DebugInfo::Own, no_kernel_namer()).symbolize(
            &[frame],
            &modules.share([module]),
            &FxHashSet::default(),
            &PerfMaps::default(),
        );
        assert_eq!(names.of(&frame), [Symbol::new("[heap]+0x123", SymbolKind::Function)]);
    }

    /// Without a namer, kernel frames are unknown, and why is said once, at the first one.
    #[test]
    fn unnamed_kernel_frames_are_said_once() {
        let mut symbolizer = Symbolizer::new(DebugInfo::Own, no_kernel_namer());
        let (frames, modules) = ([Frame::Kernel(0xffff_ffff_8100_0000)], Modules::default());
        let marker = [Frame::Marker(Marker::Runqueue)];
        symbolizer.symbolize(&marker, &modules.share([]), &FxHashSet::default(), &PerfMaps::default());
        assert_eq!(symbolizer.refused.count(), 0, "no kernel frame, nothing said");
        let unknown = [Symbol::new("[unknown kernel]", SymbolKind::Kernel)];
        for _ in 0..2 {
            let names = symbolizer.symbolize(
                &frames,
                &modules.share([]),
                &FxHashSet::default(),
                &PerfMaps::default(),
            );
            assert_eq!(names.of(&frames[0]), unknown);
        }
        assert_eq!(symbolizer.refused.count(), 1);
        assert_eq!(symbolizer.refused.kept(), ["kernel frames unnamed: no kernel namer loaded here"]);
    }
}
