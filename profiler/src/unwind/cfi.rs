//! A module's unwind information, read from its ELF file: the DWARF CFI sections framehop needs
//! and the load segments that turn file offsets into the addresses the CFI speaks in.
use std::{fs::File, ops::Range};

use anyhow::{Context as _, Result};
use framehop::ExplicitModuleSectionInfo;
use object::{Object as _, ObjectSection as _, ObjectSegment as _, read::elf::ElfFile64};

use super::eh_return::{EhReturnFrame, EhReturnFunctions};
use crate::untrusted::{Charge, ElfFacts, MAX_INFLATED_SECTION, charge_inflated, open};

/// What the unwinder knows of one module file.
pub struct ModuleCfi {
    facts: ElfFacts,
    /// Lowest and highest SVMA covered by the load segments.
    svma_range: Range<u64>,
    /// Whether the file has `.eh_frame` or `.debug_frame` (its own or its debug file's).
    has_cfi: bool,
    /// The CFI sections, until handed to framehop.
    sections: Option<ExplicitModuleSectionInfo<Vec<u8>>>,
    /// The functions that return through `__builtin_eh_return`.
    eh_return: EhReturnFunctions,
    /// What its inflated sections hold of the budget for them, while the unwinder keeps them.
    _inflated: Option<Charge>,
}

impl ModuleCfi {
    /// Reads the CFI of a module's `file`: its own `.eh_frame` (with `.eh_frame_hdr`) or
    /// `.debug_frame`, else the `.debug_frame` of its separate `debug` file.
    pub fn load(file: &File, debug: Option<&File>) -> Result<Self> {
        let data = open::map(file).context("cannot map the file")?;
        let elf = ElfFile64::<object::Endianness>::parse(&*data).context("not a 64-bit ELF file")?;
        let facts = ElfFacts::read(&data).context("not a 64-bit ELF file")?;
        let start = elf.segments().map(|s| s.address()).min().unwrap_or(0);
        let end = elf.segments().map(|s| s.address().saturating_add(s.size())).max().unwrap_or(0);
        let mut inflated = None;
        let mut sections = section_info(&elf, &mut inflated);
        if sections.eh_frame.is_none() && sections.debug_frame.is_none() {
            sections.debug_frame = debug.and_then(|debug| debug_frame(debug, &mut inflated));
        }
        let has_cfi = sections.eh_frame.is_some() || sections.debug_frame.is_some();
        let eh_return = EhReturnFunctions::find(&sections);
        Ok(Self {
            facts,
            svma_range: start..end,
            has_cfi,
            sections: has_cfi.then_some(sections),
            eh_return,
            _inflated: inflated,
        })
    }

    pub fn has_cfi(&self) -> bool {
        self.has_cfi
    }

    /// The SVMA of a file offset inside one of the load segments.
    pub fn svma(&self, file_offset: u64) -> Option<u64> {
        self.facts.svma(file_offset)
    }

    pub fn svma_range(&self) -> Range<u64> {
        self.svma_range.clone()
    }

    /// Where `svma` is in a function that returns through `__builtin_eh_return` (libgcc's
    /// `_Unwind_RaiseException`, `_Unwind_Resume`, ...), whose CFI stops telling the truth once
    /// it prepares the jump to a landing pad; `None` for any other code.
    pub fn eh_return_frame(&self, svma: u64) -> Option<EhReturnFrame> {
        self.eh_return.at(svma)
    }

    /// Hands the CFI sections over to framehop (once).
    pub fn take_sections(&mut self) -> Option<ExplicitModuleSectionInfo<Vec<u8>>> {
        self.sections.take()
    }
}

fn section_info(
    elf: &ElfFile64<'_, object::Endianness>,
    inflated: &mut Option<Charge>,
) -> ExplicitModuleSectionInfo<Vec<u8>> {
    let range =
        |name: &str| elf.section_by_name(name).map(|s| s.address()..s.address().saturating_add(s.size()));
    let mut data =
        |name: &str| elf.section_by_name(name).and_then(|section| section_bytes(section, inflated));
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

/// A section's bytes, inflated if compressed, up to [`MAX_INFLATED_SECTION`] and as the budget
/// for inflated sections allows (charged to `inflated`).
fn section_bytes(
    section: object::read::elf::ElfSection64<'_, '_, object::Endianness>,
    inflated: &mut Option<Charge>,
) -> Option<Vec<u8>> {
    let compressed = section.compressed_data().ok()?;
    if compressed.format != object::CompressionFormat::None
        && (compressed.uncompressed_size > MAX_INFLATED_SECTION
            || !charge_inflated(inflated, compressed.uncompressed_size))
    {
        return None;
    }
    let data = section.uncompressed_data().ok()?;
    (!data.is_empty()).then(|| data.into_owned())
}

/// The `.debug_frame` of a separate debug file.
fn debug_frame(debug: &File, inflated: &mut Option<Charge>) -> Option<Vec<u8>> {
    let data = open::map(debug).ok()?;
    let elf = ElfFile64::<object::Endianness>::parse(&*data).ok()?;
    elf.section_by_name(".debug_frame").and_then(|section| section_bytes(section, inflated))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unwind").join(name)
    }

    fn load(path: &Path) -> Result<ModuleCfi> {
        ModuleCfi::load(&File::open(path)?, None)
    }

    use std::path::{Path, PathBuf};

    use object::ObjectSymbol as _;

    use crate::{
        address_space::{Identity, Mapping, Modules},
        untrusted::Parts,
    };

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
    fn finds_the_functions_that_return_through_eh_return() {
        // libgcc's unwinder, linked into a static C++ program: its four entry points that hand
        // an exception to a landing pad (and the cold parts of three), nothing else of the
        // program, libstdc++ or libc.
        let path = fixture("eh_return/stoll_throw");
        let cfi = load(&path).unwrap();
        let data = std::fs::read(&path).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let mut found: Vec<&str> = elf
            .symbols()
            .filter(|symbol| symbol.size() > 0 && cfi.eh_return_frame(symbol.address()).is_some())
            .filter_map(|symbol| symbol.name().ok())
            .collect();
        found.sort_unstable();
        found.dedup();
        let expected = [
            "_Unwind_ForcedUnwind",
            "_Unwind_RaiseException",
            "_Unwind_RaiseException.cold",
            "_Unwind_Resume",
            "_Unwind_Resume.cold",
            "_Unwind_Resume_or_Rethrow",
            "_Unwind_Resume_or_Rethrow.cold",
        ];
        assert_eq!(found, expected);
        let raise = elf.symbols().find(|symbol| symbol.name() == Ok("_Unwind_RaiseException")).unwrap();
        let frame = |offset| cfi.eh_return_frame(raise.address() + offset).unwrap();
        assert_eq!(frame(0x10), EhReturnFrame { start: raise.address(), jumping: false });
        // Its last instructions: `mov %rcx,%rsp; pop %rcx; jmp *%rcx` (CFA rcx+8, rsp+8, rsp+0).
        let end = raise.address() + raise.size();
        let jumping: Vec<bool> = (end - 6..end).map(|at| cfi.eh_return_frame(at).unwrap().jumping).collect();
        assert_eq!(jumping, [true; 6], "{:#x}", end);
        assert_eq!(load(&fixture("snapshot")).unwrap().eh_return_frame(0x401000), None);
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

    /// `snapshot.c` built with its CFI in `.debug_frame` (`extra` added to gcc's flags), that
    /// section moved to `app.debug` and the binary stripped to `app` with a debug link to it.
    fn stripped_with_debug_file(dir: &Path, extra: &[&str]) -> (PathBuf, PathBuf) {
        let (built, debug, stripped) = (dir.join("built"), dir.join("app.debug"), dir.join("app"));
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
        ];
        let mut args: Vec<&std::ffi::OsStr> = flags.iter().chain(extra).map(|f| f.as_ref()).collect();
        args.extend(["-o".as_ref(), built.as_os_str(), source.as_os_str()]);
        run("gcc", &args);
        run("objcopy", &["--only-keep-debug".as_ref(), built.as_os_str(), debug.as_os_str()]);
        let link = format!("--add-gnu-debuglink={}", debug.display());
        run("objcopy", &["--strip-debug".as_ref(), link.as_ref(), built.as_os_str(), stripped.as_os_str()]);
        (stripped, debug)
    }

    /// The CFI of the module the registry makes of the file at `path`.
    fn module_cfi(path: &Path) -> ModuleCfi {
        let mut modules = Modules::with_opener(Box::new(|_, identity, _, path| {
            identity
                .root
                .open(path, &|_: std::os::fd::BorrowedFd<'_>| true)
                .and_then(|file| open::stable(file, Parts::Module))
        }));
        let mapping = Mapping::of_file(path, 0x400000, 0x401000);
        let id = modules.intern(crate::model::Tgid(1), &Identity::own(), &mapping).unwrap();
        let module = modules.get(id);
        ModuleCfi::load(module.file().unwrap(), module.debug_file().map(|debug| &*debug.file)).unwrap()
    }

    #[test]
    fn debug_frame_from_a_debuglink_file() {
        for (name, extra) in [("by build id", &[][..]), ("by CRC", &["-Wl,--build-id=none"][..])] {
            let dir = tempfile::tempdir().unwrap();
            let (stripped, _) = stripped_with_debug_file(dir.path(), extra);
            let mut cfi = module_cfi(&stripped);
            assert!(cfi.has_cfi(), "{name}: found .debug_frame through .gnu_debuglink");
            let sections = cfi.take_sections().unwrap();
            assert!(sections.eh_frame.is_none());
            let debug_frame = sections.debug_frame.unwrap();
            // A .debug_frame CIE has id 0xffffffff (an .eh_frame CIE has 0).
            assert_eq!(debug_frame[4..8], [0xff; 4]);
        }
    }

    #[test]
    fn a_debug_file_of_another_build_is_refused() {
        for (name, extra) in [("by build id", &[][..]), ("by CRC", &["-Wl,--build-id=none"][..])] {
            let dir = tempfile::tempdir().unwrap();
            let (stripped, debug) = stripped_with_debug_file(dir.path(), extra);
            // The same debug file's name, other content: a build with other flags.
            let other = tempfile::tempdir().unwrap();
            let (_, other_debug) = stripped_with_debug_file(other.path(), &[extra, &["-O1"]].concat());
            std::fs::copy(other_debug, debug).unwrap();
            assert!(!module_cfi(&stripped).has_cfi(), "{name}: the debug file does not match");
        }
    }
}
