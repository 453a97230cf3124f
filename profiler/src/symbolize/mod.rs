//! Symbolization of recorded frames with blazesym: ELF symbols and DWARF (with inlined
//! functions and demangling) for user modules, kallsyms for the kernel; PLT stubs are named
//! after the function they call ([`crate::plt`]).
//!
//! Modules are symbolized through the handles [`Modules`] keeps open, so a module symbolizes
//! after its process exited or its file was deleted. blazesym caches each parsed file by its
//! identity (device, inode, size, mtime): a library shared by many processes is parsed once.
use std::collections::{BTreeMap, HashMap};

use blazesym::{
    MaybeDefault,
    symbolize::{
        Input, Symbolized, Symbolizer as BlazeSymbolizer,
        source::{Elf, Kernel, Source},
    },
};

use rustc_hash::FxHashMap;

use crate::{
    frame::Frame,
    module::{Module, ModuleId, Modules},
    perf_map::PerfMaps,
    plt::PltStubs,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    /// A user function.
    Function,
    /// A user function inlined into the one before it.
    Inlined,
    /// A kernel function.
    Kernel,
    /// JIT-compiled code, named by the process's perf map.
    Jit,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub kind: SymbolKind,
}

impl Symbol {
    fn new(name: impl Into<String>, kind: SymbolKind) -> Self {
        Self { name: name.into(), kind }
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

pub struct Symbolizer {
    blaze: BlazeSymbolizer,
    plt: FxHashMap<ModuleId, PltStubs>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        let blaze = BlazeSymbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(true)
            .build();
        Self { blaze, plt: FxHashMap::default() }
    }
}

impl Symbolizer {
    /// Names every frame in `frames`. Frames that cannot be named get a placeholder that keeps
    /// what is known (`libfoo.so+0x1234`, `[unknown]`); errors never abort symbolization.
    pub fn symbolize(&mut self, frames: &[Frame], modules: &Modules, perf_maps: &PerfMaps) -> Symbols {
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
            }
        }
        for (addr, names) in kernel.iter().zip(self.kernel(&kernel)) {
            symbols.by_frame.insert(Frame::Kernel(*addr), names);
        }
        for (module, offsets) in by_module {
            let names = self.module(modules, module, &offsets);
            for (offset, names) in offsets.into_iter().zip(names) {
                symbols.by_frame.insert(Frame::Module { module, offset }, names);
            }
        }
        symbols
    }

    fn kernel(&self, addrs: &[u64]) -> Vec<Vec<Symbol>> {
        let source =
            Source::Kernel(Kernel { vmlinux: MaybeDefault::None, debug_syms: false, ..Kernel::default() });
        let resolved = contained(|| self.blaze.symbolize(&source, Input::AbsAddr(addrs)).unwrap_or_default());
        addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| match resolved.get(i) {
                Some(Symbolized::Sym(sym)) => vec![Symbol::new(&*sym.name, SymbolKind::Kernel)],
                _ => vec![Symbol::new(format!("{addr:#x}"), SymbolKind::Kernel)],
            })
            .collect()
    }

    fn module(&mut self, modules: &Modules, id: ModuleId, offsets: &[u64]) -> Vec<Vec<Symbol>> {
        let module = modules.get(id);
        let plt = self.plt.entry(id).or_insert_with(|| plt_stubs(module));
        let resolved = module
            .readable_path()
            .map(|path| Source::Elf(Elf::new(path)))
            .and_then(|source| contained(|| self.blaze.symbolize(&source, Input::FileOffset(offsets)).ok()))
            .unwrap_or_default();
        offsets
            .iter()
            .enumerate()
            .map(|(i, offset)| match resolved.get(i) {
                _ if let Some(stub) = plt.name(*offset) => vec![Symbol::new(stub, SymbolKind::Function)],
                Some(Symbolized::Sym(sym)) => {
                    let outer = Symbol::new(&*sym.name, SymbolKind::Function);
                    let inlined = sym.inlined.iter().map(|f| Symbol::new(&*f.name, SymbolKind::Inlined));
                    std::iter::once(outer).chain(inlined).collect()
                }
                _ => vec![Symbol::new(format!("{}+{offset:#x}", module.name()), SymbolKind::Function)],
            })
            .collect()
    }
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
    use crate::process::{Processes, Tracking};

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn names_own_function_and_unknowns() {
        let pid = std::process::id();
        let mut processes = Processes::new(Tracking { all: false, follow_forks: false });
        let mut modules = Modules::default();
        let process = processes.observe(pid, pid, "test");
        let addr = a_function_to_find as *const () as usize as u64 + 1;
        let mut frames = Vec::new();
        let stack = crate::frame::UserStack { tgid: pid, time_ns: 0, addrs: &[addr, 0x10], first_depth: 0 };
        crate::frame::push_user(&stack, process, &mut modules, &mut frames);
        let symbols = Symbolizer::default().symbolize(&frames, &modules, &PerfMaps::default());
        let names = symbols.of(&frames[0]);
        assert!(names[0].name.ends_with("a_function_to_find"), "{names:?}");
        assert_eq!(names[0].kind, SymbolKind::Function);
        assert_eq!(symbols.of(&frames[1]), [Symbol::new("[unknown]", SymbolKind::Function)]);
    }

    #[test]
    fn unreadable_module_keeps_name_and_offset() {
        let mut modules = Modules::default();
        let vdso = crate::maps::Mapping {
            start: 0x1000,
            end: 0x3000,
            offset: 0,
            executable: true,
            dev: 0,
            inode: 0,
            backing: crate::maps::Backing::Pseudo("[vdso]".into()),
        };
        let module = modules.intern(1, &vdso).unwrap();
        let frame = Frame::Module { module, offset: 0x123 };
        let symbols = Symbolizer::default().symbolize(&[frame], &modules, &PerfMaps::default());
        assert_eq!(symbols.of(&frame), [Symbol::new("[vdso]+0x123", SymbolKind::Function)]);
    }
}
