//! A module's unwind information, read from its ELF file: the DWARF CFI sections framehop needs
//! and the load segments that turn file offsets into the addresses the CFI speaks in.
use std::{
    fs::File,
    ops::Range,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use framehop::ExplicitModuleSectionInfo;
use object::{Object as _, ObjectSection as _, ObjectSegment as _, read::elf::ElfFile64};

use crate::address_space::open;

/// Directories searched for separate debug files, as gdb and blazesym do.
const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// One `PT_LOAD` segment: where a range of the file lives in the module's own address space
/// (its "stated virtual memory addresses", SVMAs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    file_offset: u64,
    file_size: u64,
    svma: u64,
}

/// What the unwinder knows of one module file.
pub struct ModuleCfi {
    segments: Vec<Segment>,
    /// Lowest and highest SVMA covered by the load segments.
    svma_range: Range<u64>,
    /// Whether the file has `.eh_frame` or `.debug_frame` (its own or a separate debug file's).
    has_cfi: bool,
    /// The CFI sections, until handed to framehop.
    sections: Option<ExplicitModuleSectionInfo<Vec<u8>>>,
}

impl ModuleCfi {
    /// Reads the module's `file`; `original` is the path the target mapped, used to find separate
    /// debug files next to it.
    pub fn load(file: &File, original: &Path) -> Result<Self> {
        let data = open::map(file).with_context(|| format!("cannot map {}", original.display()))?;
        let elf = ElfFile64::<object::Endianness>::parse(&*data)
            .with_context(|| format!("{} is not a 64-bit ELF file", original.display()))?;
        let segments: Vec<Segment> = elf
            .segments()
            .map(|segment| {
                let (file_offset, file_size) = segment.file_range();
                Segment { file_offset, file_size, svma: segment.address() }
            })
            .collect();
        let start = elf.segments().map(|s| s.address()).min().unwrap_or(0);
        let end = elf.segments().map(|s| s.address() + s.size()).max().unwrap_or(0);
        let mut sections = section_info(&elf);
        if sections.eh_frame.is_none() && sections.debug_frame.is_none() {
            sections.debug_frame = separate_debug_frame(&elf, original);
        }
        let has_cfi = sections.eh_frame.is_some() || sections.debug_frame.is_some();
        Ok(Self { segments, svma_range: start..end, has_cfi, sections: has_cfi.then_some(sections) })
    }

    pub fn has_cfi(&self) -> bool {
        self.has_cfi
    }

    /// The SVMA of a file offset inside one of the load segments. The module base is computed
    /// from the program headers: `mapping start - mapping offset` only works when each
    /// segment's address equals its file offset.
    pub fn svma(&self, file_offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| (s.file_offset..s.file_offset + s.file_size).contains(&file_offset))
            .map(|s| s.svma + (file_offset - s.file_offset))
    }

    pub fn svma_range(&self) -> Range<u64> {
        self.svma_range.clone()
    }

    /// Hands the CFI sections over to framehop (once).
    pub fn take_sections(&mut self) -> Option<ExplicitModuleSectionInfo<Vec<u8>>> {
        self.sections.take()
    }
}

fn section_info(elf: &ElfFile64<'_, object::Endianness>) -> ExplicitModuleSectionInfo<Vec<u8>> {
    let range = |name: &str| elf.section_by_name(name).map(|s| s.address()..s.address() + s.size());
    let data = |name: &str| elf.section_by_name(name).and_then(section_bytes);
    ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame: data(".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        eh_frame_hdr: data(".eh_frame_hdr"),
        debug_frame: data(".debug_frame"),
        ..Default::default()
    }
}

fn section_bytes(section: object::read::elf::ElfSection64<'_, '_, object::Endianness>) -> Option<Vec<u8>> {
    let data = section.uncompressed_data().ok()?;
    (!data.is_empty()).then(|| data.into_owned())
}

/// `.debug_frame` from a separate debug file: by build id under the debug directories, then by
/// `.gnu_debuglink` next to the file, in its `.debug/` directory and under the debug directories.
fn separate_debug_frame(elf: &ElfFile64<'_, object::Endianness>, original: &Path) -> Option<Vec<u8>> {
    debug_file_candidates(elf, original).into_iter().find_map(|candidate| {
        let data = open::map_path(&candidate).ok()?;
        let debug = ElfFile64::<object::Endianness>::parse(&*data).ok()?;
        debug.section_by_name(".debug_frame").and_then(section_bytes)
    })
}

fn debug_file_candidates(elf: &ElfFile64<'_, object::Endianness>, original: &Path) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(Some(id)) = elf.build_id()
        && let Some((first, rest)) = id.split_first()
    {
        let rest: String = rest.iter().map(|b| format!("{b:02x}")).collect();
        for dir in DEBUG_DIRS {
            candidates.push(PathBuf::from(format!("{dir}/.build-id/{first:02x}/{rest}.debug")));
        }
    }
    if let Ok(Some((name, _crc))) = elf.gnu_debuglink() {
        let name = Path::new(std::str::from_utf8(name).unwrap_or_default());
        if let Some(dir) = original.parent() {
            candidates.push(dir.join(name));
            candidates.push(dir.join(".debug").join(name));
            for debug_dir in DEBUG_DIRS {
                candidates.push(Path::new(debug_dir).join(dir.strip_prefix("/").unwrap_or(dir)).join(name));
            }
        }
    }
    candidates.retain(|c| c.as_path() != original);
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unwind").join(name)
    }

    fn load(path: &Path) -> Result<ModuleCfi> {
        ModuleCfi::load(&File::open(path)?, path)
    }

    #[test]
    fn reads_cfi_and_segments() {
        let path = fixture("snapshot");
        let mut cfi = load(&path).unwrap();
        assert!(cfi.has_cfi());
        // Non-PIE: the text segment sits at 0x401000, file offset 0x1000.
        assert_eq!(cfi.svma(0x1010), Some(0x401010));
        assert_eq!(cfi.svma(0x10_0000), None);
        assert_eq!(cfi.svma_range().start, 0x400000);
        let sections = cfi.take_sections().unwrap();
        assert!(sections.eh_frame.is_some() && sections.eh_frame_hdr.is_some());
    }

    #[test]
    fn file_without_cfi() {
        let path = fixture("snapshot-nocfi");
        let cfi = load(&path).unwrap();
        assert!(!cfi.has_cfi());
        assert_eq!(cfi.svma(0x1010), Some(0x401010));
    }

    #[test]
    fn not_an_elf_file() {
        let path = fixture("snapshot.c");
        let err = load(&path).err().unwrap();
        assert!(format!("{err:#}").contains("not a 64-bit ELF file"), "{err:#}");
    }

    #[test]
    fn debug_frame_from_a_debuglink_file() {
        let dir = tempfile::tempdir().unwrap();
        let (built, debug, stripped) =
            (dir.path().join("built"), dir.path().join("app.debug"), dir.path().join("app"));
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            let status = std::process::Command::new(program).args(args).status().unwrap();
            assert!(status.success(), "{program} {args:?}");
        };
        // Without unwind tables gcc writes the CFI as .debug_frame, which strip moves out.
        let source = fixture("snapshot.c");
        let flags = [
            "-O2",
            "-g",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-static",
            "-nostdlib",
            "-fno-stack-protector",
            "-o",
        ];
        let mut args: Vec<&std::ffi::OsStr> = flags.iter().map(|f| f.as_ref()).collect();
        args.extend([built.as_os_str(), source.as_os_str()]);
        run("gcc", &args);
        run("objcopy", &["--only-keep-debug".as_ref(), built.as_os_str(), debug.as_os_str()]);
        let link = format!("--add-gnu-debuglink={}", debug.display());
        run("objcopy", &["--strip-debug".as_ref(), link.as_ref(), built.as_os_str(), stripped.as_os_str()]);

        let mut cfi = load(&stripped).unwrap();
        assert!(cfi.has_cfi(), "found .debug_frame through .gnu_debuglink");
        let sections = cfi.take_sections().unwrap();
        assert!(sections.eh_frame.is_none());
        let debug_frame = sections.debug_frame.unwrap();
        // A .debug_frame CIE has id 0xffffffff (an .eh_frame CIE has 0).
        assert_eq!(debug_frame[4..8], [0xff; 4]);
    }
}
