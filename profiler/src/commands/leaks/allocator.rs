//! Which allocator a process calls, and where its entry points are.
//!
//! The dynamic linker binds `malloc` to the first object in load order that defines it: the
//! program itself (static binaries, or an allocator linked in), then preloaded libraries, then
//! the libraries it needs (jemalloc, tcmalloc, mimalloc...), libc last. The tracker probes that
//! object only: the other allocators in the process are never called for `malloc`.
//!
//! C++'s operator new and delete are probed where that object defines them too: tcmalloc's,
//! jemalloc's and mimalloc's never call `malloc`. libstdc++'s do, and are left to it.
use std::{
    collections::HashMap,
    ffi::OsStr,
    fs::File,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use object::{Object as _, ObjectSegment as _, ObjectSymbol as _, SymbolKind};
use profiler_common::AllocFunction;

use crate::{
    address_space::{Backing, Mapping, Mappings, program},
    kernel::tracer::{Allocator, EntryPoint, EntryPoints},
    model::Tgid,
    session::Target,
    untrusted::{Parts, mounts, open},
};

/// Every form of C++'s operator new (plain, array, aligned, nothrow): the size comes first and
/// the block is returned, as with `malloc`.
const OPERATOR_NEW: [&str; 8] = [
    "_Znwm",
    "_Znam",
    "_ZnwmRKSt9nothrow_t",
    "_ZnamRKSt9nothrow_t",
    "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t",
];

/// `free` and every form of C++'s operator delete (plain, array, sized, aligned, nothrow): the
/// block comes first.
const RELEASES: [&str; 13] = [
    "free",
    "_ZdlPv",
    "_ZdaPv",
    "_ZdlPvm",
    "_ZdaPvm",
    "_ZdlPvRKSt9nothrow_t",
    "_ZdaPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t",
    "_ZdaPvSt11align_val_t",
    "_ZdlPvmSt11align_val_t",
    "_ZdaPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    "_ZdaPvSt11align_val_tRKSt9nothrow_t",
];

/// An object the target loads, in load order: the path it names it by, and the file itself
/// (probes go on its inode; its bytes are read from a [stable](open::stable) copy when its
/// owner can change it).
struct Candidate {
    path: PathBuf,
    file: File,
}

/// The allocator the target calls: a running process's, or a held command's once it runs.
pub(super) fn of_target(target: &Target) -> Result<Allocator> {
    match target {
        Target::Command(pending) => of_command(pending.program()),
        _ => of_process(target.pids()[0]),
    }
}

/// The allocator of a running process: its program, then the other objects it maps that
/// define `malloc`, libc last. (The maps do not give the load order; an allocator library
/// other than libc is almost always there to replace it.) Each is read through the mapping
/// itself (`/proc/PID/map_files`): the very file the process runs, wherever its root is.
fn of_process(pid: Tgid) -> Result<Allocator> {
    let mappings = Mappings::read(pid).with_context(|| format!("cannot read the mappings of PID {pid}"))?;
    let program = std::fs::read_link(format!("/proc/{pid}/exe"))
        .with_context(|| format!("cannot find the program of PID {pid}"))?;
    let mut files: Vec<(&Path, &Mapping)> = Vec::new();
    for mapping in mappings.mappings() {
        if let Backing::File { path, .. } = &mapping.backing
            && !is_dynamic_linker(path)
            && files.iter().all(|(known, _)| known != path)
        {
            files.push((path, mapping));
        }
    }
    // The program first, libc last.
    files.sort_by_key(|(path, _)| (*path != program, is_libc(path)));
    let namespace = mounts::Namespace::of(pid);
    let candidates = files
        .into_iter()
        .filter_map(|(path, mapping)| {
            let file = open::mapped_file(pid, None, mapping.at(), namespace.as_ref()).ok()?;
            Some(Candidate { path: path.to_owned(), file })
        })
        .collect();
    choose(candidates, &format!("PID {pid}"))
}

/// The allocator a command will call once started: the program if it is static or defines
/// `malloc`, else the first library its dynamic linker lists (in load order, with
/// `LD_PRELOAD` and `LD_LIBRARY_PATH` applied) that does.
fn of_command(program: &OsStr) -> Result<Allocator> {
    let order = program::load_order(program, &open::own_file)?;
    let libraries = order
        .libraries
        .iter()
        .filter(|library| Some(*library) != order.linker.as_ref() && !is_dynamic_linker(library));
    let candidates = std::iter::once(&order.program)
        .chain(libraries)
        .filter_map(|path| Some(Candidate { file: open::own_file(path).ok()?, path: path.clone() }))
        .collect();
    choose(candidates, &order.program.display().to_string())
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(OsStr::to_str).unwrap_or("")
}

fn is_libc(path: &Path) -> bool {
    file_name(path).starts_with("libc.so")
}

/// The dynamic linker has a small allocator of its own for its start-up, never the program's.
fn is_dynamic_linker(path: &Path) -> bool {
    file_name(path).starts_with("ld-")
}

fn choose(candidates: Vec<Candidate>, target: &str) -> Result<Allocator> {
    for Candidate { path, file } in candidates {
        // Non-ELF mappings (fonts, locale archives) cannot be the allocator.
        let Ok(readable) = file.try_clone().and_then(|file| open::stable(file, Parts::Module)) else {
            continue;
        };
        let Ok(data) = open::map(&readable) else { continue };
        if let Some(entry_points) = entry_points(&data) {
            return Ok(Allocator { path, file, entry_points });
        }
    }
    bail!(
        "cannot find the allocator of {target}: no object it loads defines malloc and free \
         (a static binary stripped of its symbols?)"
    )
}

/// The allocation and release functions of an object that defines `malloc` and `free`.
fn entry_points(data: &[u8]) -> Option<EntryPoints> {
    let elf = object::File::parse(data).ok()?;
    let c_functions = AllocFunction::ALL.iter().map(|&f| (f.symbol(), f));
    let operator_new = OPERATOR_NEW.iter().map(|&name| (name, AllocFunction::Malloc));
    let allocation_symbols: Vec<(&'static str, AllocFunction)> = c_functions.chain(operator_new).collect();
    let wanted = allocation_symbols.iter().map(|&(name, _)| name).chain(RELEASES);
    let offsets = function_offsets(&elf, wanted);
    if !offsets.contains_key("malloc") || !offsets.contains_key("free") {
        return None;
    }
    let entry_point = |symbol| Some(EntryPoint { symbol, offset: *offsets.get(symbol)? });
    let mut allocations: Vec<(AllocFunction, EntryPoint)> = Vec::new();
    for (function, entry) in
        allocation_symbols.into_iter().filter_map(|(name, f)| Some((f, entry_point(name)?)))
    {
        // Two uprobes at one address would see each call twice.
        if allocations.iter().all(|(_, known)| known.offset != entry.offset) {
            allocations.push((function, entry));
        }
    }
    let mut releases: Vec<EntryPoint> = Vec::new();
    for entry in RELEASES.into_iter().filter_map(entry_point) {
        if releases.iter().all(|known| known.offset != entry.offset) {
            releases.push(entry);
        }
    }
    Some(EntryPoints { allocations, releases })
}

/// File offsets of the functions named `wanted` that the object defines (its dynamic symbols
/// first, then its symbol table).
fn function_offsets(
    elf: &object::File,
    wanted: impl IntoIterator<Item = &'static str>,
) -> HashMap<&'static str, u64> {
    let wanted: Vec<&'static str> = wanted.into_iter().collect();
    let mut offsets = HashMap::new();
    for symbol in elf.dynamic_symbols().chain(elf.symbols()) {
        if !symbol.is_definition() || symbol.kind() != SymbolKind::Text {
            continue;
        }
        let Some(&name) = symbol.name().ok().and_then(|name| wanted.iter().find(|&&w| w == name)) else {
            continue;
        };
        if let Some(offset) = file_offset(elf, symbol.address()) {
            offsets.entry(name).or_insert(offset);
        }
    }
    offsets
}

/// Uprobes take file offsets: the address's place in the loadable segment that holds it.
fn file_offset(elf: &object::File, address: u64) -> Option<u64> {
    elf.segments().find_map(|segment| {
        let start = segment.address();
        let (offset, size) = segment.file_range();
        (start..start + size).contains(&address).then(|| address - start + offset)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_allocates_through_libc() {
        let allocator = of_command(OsStr::new("true")).unwrap();
        assert!(is_libc(&allocator.path), "{allocator}");
        let names: Vec<&str> =
            allocator.entry_points.allocations.iter().map(|(_, entry)| entry.symbol).collect();
        for name in ["malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc"] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        // glibc's memalign is aligned_alloc under another name: one probe for both.
        assert!(!names.contains(&"memalign"), "{names:?}");
        let releases: Vec<&str> = allocator.entry_points.releases.iter().map(|entry| entry.symbol).collect();
        assert_eq!(releases, ["free"], "libc has no operator delete");
    }

    #[test]
    fn offsets_point_at_the_functions() {
        // As the profiler runs: as root, which alone opens a process's files through
        // /proc/PID/map_files (and reads what they are).
        if !crate::testing::e2e_enabled() {
            return;
        }
        // In this very process, libc's malloc is where the mapping of its file offset says.
        let allocator = of_process(Tgid::own()).unwrap();
        let malloc_offset =
            allocator.entry_points.allocations.iter().find(|(_, e)| e.symbol == "malloc").unwrap().1.offset;
        let malloc = libc::malloc as *const () as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mapped = maps.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (range, offset, path) = (fields[0], fields[2], fields.get(5).copied().unwrap_or(""));
            let (start, end) = range.split_once('-').unwrap();
            let (start, end) =
                (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
            let offset = u64::from_str_radix(offset, 16).unwrap();
            Path::new(path) == allocator.path
                && (start..end).contains(&malloc)
                && malloc - start + offset == malloc_offset
        });
        assert!(mapped, "malloc at {malloc:#x} is at offset {malloc_offset:#x} of {allocator}");
    }

    #[test]
    fn an_allocator_with_operator_new_and_aliases() {
        // Laid out as tcmalloc is; see the fixture's source.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/allocator/liballoc.so");
        let entry_points = entry_points(&std::fs::read(path).unwrap()).unwrap();
        let allocations: Vec<&str> = entry_points.allocations.iter().map(|(_, e)| e.symbol).collect();
        // Its operator new[] is its operator new: one probe for both.
        assert_eq!(allocations, ["malloc", "calloc", "realloc", "_Znwm", "_ZnwmSt11align_val_t"]);
        // Its free is also its operator delete and operator delete[]: one probe for the three.
        let releases: Vec<&str> = entry_points.releases.iter().map(|e| e.symbol).collect();
        assert_eq!(releases, ["free", "_ZdlPvm"]);
        let mut offsets: Vec<u64> = entry_points.releases.iter().map(|e| e.offset).collect();
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), releases.len());
    }

    #[test]
    fn objects_without_malloc_are_not_allocators() {
        assert_eq!(entry_points(b"not an ELF file"), None);
        let own = std::fs::read("/proc/self/exe").unwrap();
        assert_eq!(entry_points(&own), None, "the test binary allocates through libc");
    }

    #[test]
    fn missing_program() {
        let err = of_command(OsStr::new("no-such-program-xyz")).unwrap_err();
        assert_eq!(err.to_string(), "cannot run no-such-program-xyz: not found in PATH");
    }
}
