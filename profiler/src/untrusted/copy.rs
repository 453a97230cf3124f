//! Copies of files their owner can change, made before anything maps them (see
//! [`open::stable`](super::open::stable)), and the one budget all of them share.
//!
//! A copy holds what is read and no more: the data of the file only (holes stay holes, and so
//! do runs of zeros), and for a module only the parts the stages read (everything but its code,
//! which nothing reads but the PLT stubs). All copies alive at once hold at most
//! [`COPY_BUDGET`]; a module's DWARF is copied only when it fits as well, and a file whose other
//! parts do not fit is not copied at all. Both are counted, so the summary can say so.
use std::{
    fs::File,
    io,
    ops::{Deref, Range},
    os::unix::fs::FileExt as _,
    sync::Mutex,
};

use super::{
    budget::{Budget, Charge},
    descriptors::Slot,
    elf::is_dwarf,
};
use object::{
    elf::{FileHeader64, SHF_EXECINSTR, SHT_NOBITS, SectionHeader64},
    read::elf::{FileHeader as _, SectionHeader as _},
};
use rustix::fs::{MemfdFlags, SealFlags, SeekFrom, fcntl_add_seals, memfd_create, seek};

/// Bytes all copies alive at once may hold.
pub(crate) const COPY_BUDGET: u64 = 256 << 20;

/// The budget every copy is charged to.
static COPIES: Budget = Budget::new(COPY_BUDGET);

/// What the budget turned away, over the profiler's life.
static REFUSED: Mutex<Refused> = Mutex::new(Refused { unread: 0, without_dwarf: 0, first: None });

/// Copies the budget turned away.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Refused {
    /// Files left unread: even their parts other than DWARF did not fit.
    pub unread: u64,
    /// Modules copied without their DWARF.
    pub without_dwarf: u64,
    /// The size of the first file turned away, to name in a warning.
    pub first: Option<u64>,
}

/// What the budget turned away so far.
pub(crate) fn refused() -> Refused {
    REFUSED.lock().map(|refused| refused.clone()).unwrap_or_default()
}

fn note_refusal(size: u64, unread: bool) {
    if let Ok(mut refused) = REFUSED.lock() {
        if unread {
            refused.unread += 1;
        } else {
            refused.without_dwarf += 1;
        }
        refused.first.get_or_insert(size);
    }
}

/// A file that is safe to map: the file itself, or a sealed copy whose bytes count against
/// [`COPY_BUDGET`] while it lives.
#[derive(Debug)]
pub struct StableFile {
    file: File,
    /// What a copy holds of the budget.
    charge: Option<Charge>,
    /// Who could change the file it is (or is a copy of).
    writer: Writer,
    /// Its place among the descriptors kept.
    _slot: Option<Slot>,
}

/// Who can change a file, and so who chose what it says: root alone (a system file), one user
/// (its owner), or anyone (writable by its group or by others).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Writer {
    Root,
    User(u32),
    Anyone,
}

impl Writer {
    /// Who can change a file of owner `uid` and permission bits `mode`.
    pub fn of(uid: u32, mode: u32) -> Self {
        match (uid, mode & 0o022) {
            (_, 0o022 | 0o020 | 0o002) => Self::Anyone,
            (0, _) => Self::Root,
            (uid, _) => Self::User(uid),
        }
    }
}

impl StableFile {
    /// The file itself: nobody but root can change it.
    pub fn unchanged(file: File) -> Self {
        Self { file, charge: None, writer: Writer::Root, _slot: None }
    }

    /// Whether this is a copy, not the file itself.
    pub fn is_copy(&self) -> bool {
        self.charge.is_some()
    }

    /// Who could change the file it is, or is a copy of.
    pub fn writer(&self) -> Writer {
        self.writer
    }

    /// The same, a copy of a file `writer` can change.
    pub fn written_by(self, writer: Writer) -> Self {
        Self { writer, ..self }
    }

    /// The same, counted among the descriptors kept as `slot`.
    pub fn in_slot(self, slot: Slot) -> Self {
        Self { _slot: Some(slot), ..self }
    }
}

impl Deref for StableFile {
    type Target = File;

    fn deref(&self) -> &File {
        &self.file
    }
}

/// Which parts of a file a copy holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parts {
    /// All of it (a debug file, whose checksum covers all of it; a file the profiler checks).
    Whole,
    /// What the stages read of a module: its ELF headers and every section but code (PLT stubs
    /// kept) and, when it fits, DWARF. Anything not ELF is copied whole.
    Module,
}

/// A sealed copy of the first `size` bytes of `file`, holding `parts`.
pub(super) fn sealed_copy(file: &File, size: u64, parts: Parts) -> io::Result<StableFile> {
    copy_within(&COPIES, file, size, parts)
}

fn copy_within(budget: &'static Budget, file: &File, size: u64, parts: Parts) -> io::Result<StableFile> {
    let plan = match parts {
        Parts::Module => module_plan(file, size).unwrap_or_else(|| Plan::whole(size)),
        Parts::Whole => Plan::whole(size),
    };
    let Some(mut charge) = budget.charge(data_bytes(file, &plan.essential)) else {
        note_refusal(size, true);
        return Err(io::Error::new(io::ErrorKind::OutOfMemory, "over the budget for copies"));
    };
    let copy = File::from(memfd_create("profiler-copy", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?);
    copy.set_len(size)?;
    copy_ranges(file, &copy, &plan.essential)?;
    if charge.grow(data_bytes(file, &plan.dwarf)) {
        copy_ranges(file, &copy, &plan.dwarf)?;
    } else {
        // The copy's own headers say the DWARF is not there, so no reader takes zeros for it.
        note_refusal(size, false);
        for &at in &plan.dwarf_headers {
            copy.write_all_at(&SHT_NOBITS.to_le_bytes(), at)?;
        }
    }
    fcntl_add_seals(&copy, SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL)?;
    // A copy is of a file someone other than root could change: `open::stable` says who.
    Ok(StableFile { file: copy, charge: Some(charge), writer: Writer::Anyone, _slot: None })
}

/// The ranges of a file to copy.
struct Plan {
    essential: Vec<Range<u64>>,
    dwarf: Vec<Range<u64>>,
    /// Where the `sh_type` of each DWARF section header is.
    dwarf_headers: Vec<u64>,
}

impl Plan {
    fn whole(size: u64) -> Self {
        Self { essential: std::iter::once(0..size).collect(), dwarf: Vec::new(), dwarf_headers: Vec::new() }
    }
}

/// Section headers read at most (as many as an ELF file can number without extensions).
const MAX_SECTIONS: u64 = 0xff00;
/// Largest section-name table read.
const MAX_NAMES: u64 = 1 << 20;
/// The PLT sections, whose stubs are decoded to name them.
const PLT_SECTIONS: [&[u8]; 3] = [b".plt", b".plt.sec", b".plt.got"];

/// What a module's copy holds, read from the headers of the `size` bytes of `file`; `None` when
/// it is not a 64-bit little-endian ELF file with sane headers.
fn module_plan(file: &File, size: u64) -> Option<Plan> {
    let mut bytes = [0u8; size_of::<FileHeader64<object::LittleEndian>>()];
    file.read_exact_at(&mut bytes, 0).ok()?;
    let header = FileHeader64::<object::LittleEndian>::parse(&bytes[..]).ok()?;
    let endian = header.endian().ok()?;
    let (shoff, count) = (header.e_shoff(endian), u64::from(header.e_shnum(endian)));
    let entry = size_of::<SectionHeader64<object::LittleEndian>>() as u64;
    if count == 0 || count > MAX_SECTIONS || u64::from(header.e_shentsize(endian)) != entry {
        return None;
    }
    let table = shoff..shoff.checked_add(count * entry).filter(|&end| end <= size)?;
    let mut raw = vec![0u8; (count * entry) as usize];
    file.read_exact_at(&mut raw, shoff).ok()?;
    let sections: &[SectionHeader64<object::LittleEndian>] = object::pod::slice_from_all_bytes(&raw).ok()?;
    let names = sections.get(usize::from(header.e_shstrndx(endian)))?;
    let names_range = in_file(names.file_range(endian)?, size)?;
    if names_range.end - names_range.start > MAX_NAMES {
        return None;
    }
    let mut names_bytes = vec![0u8; (names_range.end - names_range.start) as usize];
    file.read_exact_at(&mut names_bytes, names_range.start).ok()?;
    let program_headers = header.e_phoff(endian)
        ..header
            .e_phoff(endian)
            .saturating_add(u64::from(header.e_phnum(endian)) * u64::from(header.e_phentsize(endian)));
    let mut plan = Plan {
        essential: vec![0..bytes.len() as u64, program_headers, table, names_range],
        dwarf: Vec::new(),
        dwarf_headers: Vec::new(),
    };
    for (index, section) in sections.iter().enumerate() {
        let Some(range) = section.file_range(endian).and_then(|range| in_file(range, size)) else { continue };
        let name = names_bytes.get(section.sh_name(endian) as usize..).unwrap_or_default();
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        let code = section.sh_flags(endian) & u64::from(SHF_EXECINSTR) != 0;
        if is_dwarf(name) {
            plan.dwarf.push(range);
            plan.dwarf_headers.push(shoff + index as u64 * entry + 4);
        } else if !code || PLT_SECTIONS.contains(&name) {
            plan.essential.push(range);
        }
    }
    Some(plan)
}

/// A section's `(offset, size)` as a range within the file's `size` bytes.
fn in_file((offset, len): (u64, u64), size: u64) -> Option<Range<u64>> {
    let end = offset.checked_add(len).filter(|&end| end <= size)?;
    Some(offset..end)
}

/// The bytes of `file` in `ranges` that hold data: holes are left out.
fn data_bytes(file: &File, ranges: &[Range<u64>]) -> u64 {
    ranges
        .iter()
        .map(|range| extents(file, range.clone()).map(|extent| extent.end - extent.start).sum::<u64>())
        .sum()
}

/// The runs of `range` in `file` that hold data (a file system that cannot tell holes gives the
/// whole range).
fn extents(file: &File, range: Range<u64>) -> impl Iterator<Item = Range<u64>> + '_ {
    let mut at = range.start;
    std::iter::from_fn(move || {
        if at >= range.end {
            return None;
        }
        let start = match seek(file, SeekFrom::Data(at)) {
            Ok(start) => start,
            Err(rustix::io::Errno::NXIO) => return None,
            Err(_) => at,
        };
        let end = seek(file, SeekFrom::Hole(start)).unwrap_or(range.end).min(range.end);
        at = end;
        (start < end).then_some(start..end)
    })
}

/// Bytes copied at a time; a chunk of zeros is not written, so it stays a hole in the copy.
const CHUNK: usize = 1 << 20;

fn copy_ranges(file: &File, copy: &File, ranges: &[Range<u64>]) -> io::Result<()> {
    let mut buffer = vec![0u8; CHUNK];
    for range in ranges {
        for extent in extents(file, range.clone()) {
            let mut at = extent.start;
            while at < extent.end {
                let len = (extent.end - at).min(CHUNK as u64) as usize;
                let read = file.read_at(&mut buffer[..len], at)?;
                if read == 0 {
                    break;
                }
                if buffer[..read].iter().any(|&b| b != 0) {
                    copy.write_all_at(&buffer[..read], at)?;
                }
                at += read as u64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::{os::unix::fs::MetadataExt as _, path::Path};

    use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SectionFlags};

    use super::*;
    use crate::untrusted::{ElfFacts, open};

    fn budget(limit: u64) -> &'static Budget {
        Box::leak(Box::new(Budget::new(limit)))
    }

    /// A module with symbols, CFI and DWARF.
    fn module() -> (File, u64) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unwind/snapshot");
        let file = File::open(path).unwrap();
        let size = file.metadata().unwrap().len();
        (file, size)
    }

    fn symbols(image: &[u8]) -> Vec<(String, u64)> {
        let elf = object::File::parse(image).unwrap();
        elf.symbols().map(|s| (s.name().unwrap().to_owned(), s.address())).collect()
    }

    #[test]
    fn a_module_copy_holds_all_but_its_code() {
        let (file, size) = module();
        let budget = budget(1 << 30);
        let copy = copy_within(budget, &file, size, Parts::Module).unwrap();
        let original = open::map(&file).unwrap();
        let copied = open::map(&copy).unwrap();
        assert_eq!(copied.len(), original.len());
        let (theirs, ours) =
            (object::File::parse(&*original).unwrap(), object::File::parse(&*copied).unwrap());
        let mut code = 0;
        for section in theirs.sections() {
            let SectionFlags::Elf { sh_flags } = section.flags() else { unreachable!() };
            let data = ours.section_by_name(section.name().unwrap()).unwrap().data().unwrap();
            let name = section.name().unwrap();
            if sh_flags & u64::from(SHF_EXECINSTR) != 0 && !name.starts_with(".plt") {
                assert!(data.iter().all(|&b| b == 0), "{name}: code is not copied");
                code += data.len();
            } else {
                assert_eq!(data, section.data().unwrap(), "{name}");
            }
        }
        assert!(code > 0);
        assert_eq!(symbols(&copied), symbols(&original));
        assert_eq!(ElfFacts::read(&copied), ElfFacts::read(&original));
        let held = budget.held();
        assert!(held > 0 && held < size, "{held} of {size} bytes charged");
        drop(copy);
        assert_eq!(budget.held(), 0, "given back with the copy");
    }

    #[test]
    fn without_room_for_its_dwarf_a_copy_says_it_has_none() {
        let (file, size) = module();
        let roomy = budget(1 << 30);
        let whole = copy_within(roomy, &file, size, Parts::Module).unwrap();
        let dwarf = data_bytes(&file, &module_plan(&file, size).unwrap().dwarf);
        let tight = budget(roomy.held() - dwarf);
        let copy = copy_within(tight, &file, size, Parts::Module).unwrap();
        let (full, cut) = (open::map(&whole).unwrap(), open::map(&copy).unwrap());
        let facts = ElfFacts::read(&cut).unwrap();
        assert!(!facts.has_dwarf && facts.has_cfi, "{facts:?}");
        let elf = object::File::parse(&*cut).unwrap();
        assert!(
            elf.section_by_name(".debug_info").unwrap().file_range().is_none(),
            "marked as holding nothing"
        );
        assert_eq!(symbols(&cut), symbols(&full));
        assert!(copy_within(budget(0), &file, size, Parts::Module).is_err(), "no room at all: not copied");
    }

    #[test]
    fn holes_and_zeros_stay_holes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let file = File::create(&path).unwrap();
        let size = 256 << 20;
        file.set_len(size).unwrap();
        file.write_all_at(b"data", 128 << 20).unwrap();
        file.write_all_at(&vec![0; 4 << 20], 64 << 20).unwrap();
        let budget = budget(1 << 30);
        let copy = copy_within(budget, &File::open(&path).unwrap(), size, Parts::Whole).unwrap();
        let mut bytes = [0; 4];
        copy.read_exact_at(&mut bytes, 128 << 20).unwrap();
        assert_eq!(&bytes, b"data");
        assert_eq!(copy.metadata().unwrap().len(), size);
        let allocated = copy.metadata().unwrap().blocks() * 512;
        assert!(allocated <= 1 << 20, "{allocated} bytes held by the copy of a sparse file");
        assert!(budget.held() <= 8 << 20, "charged for its data only");
    }
}
