//! Where Go's linker put what the table needs in a binary: the table's section, the runtime's
//! module data (`runtime.firstmoduledata`, which says where Go's text and its functions' data
//! start when the table does not), the release that built it (`.go.buildinfo`), and the load
//! segments that turn the addresses those hold into places in the file.
use std::ops::Range;

use anyhow::{Result, bail};
use object::{
    Object as _, ObjectSection as _, ObjectSegment as _, elf,
    read::elf::{ElfFile64, ProgramHeader as _},
};

use super::table::{read_u64, uvarint};

/// The sections Go's linker puts the table in (position-independent builds before Go 1.26 put
/// it with the data made read-only after relocation).
const SECTIONS: [&str; 2] = [".gopclntab", ".data.rel.ro.gopclntab"];
/// Where external linking merges the latter.
const MERGED_SECTION: &str = ".data.rel.ro";
/// Go 1.26 and later give `runtime.firstmoduledata` a section of its own.
const MODULE_SECTION: &str = ".go.module";
/// Where it is before that.
const MODULE_DATA_SECTIONS: [&str; 2] = [".noptrdata", ".data"];
/// Words of the module data kept: as far as its last field read (`gofunc`, Go 1.27's).
const MODULE_WORDS: usize = 44;
/// The section the release is in, which every Go binary has (Go 1.13 and later), and its
/// header's magic.
pub(super) const BUILD_INFO_SECTION: &str = ".go.buildinfo";
const BUILD_INFO_MAGIC: &[u8] = b"\xff Go buildinf:";
/// The release's length read at most (`go1.26.10`, or `devel go1.27-abcdef Tue ...`).
const MAX_RELEASE: usize = 128;

/// What a Go binary holds around its table of functions.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Where the table is in the file.
    pub table: Range<usize>,
    /// The table's address (an SVMA).
    pub address: u64,
    /// The first words of `runtime.firstmoduledata`, when found.
    pub module_data: Option<Vec<u64>>,
    /// The release that built it (`go1.26.10`), when it says.
    pub release: Option<String>,
    /// The load segments: their addresses (SVMAs) and where they start in the file.
    pub segments: Vec<(Range<u64>, u64)>,
    /// The size of the executable's static TLS block (`PT_TLS`), when it has one.
    pub tls_bytes: Option<u64>,
}

impl Placement {
    /// What the ELF file `bytes` holds around its table: `None` when it has none.
    pub(super) fn find(bytes: &[u8]) -> Result<Option<Self>> {
        let elf = ElfFile64::<object::Endianness>::parse(bytes)?;
        let Some((address, start, size)) = table(&elf)? else { return Ok(None) };
        let segments = elf
            .segments()
            .filter_map(|segment| {
                let (offset, size) = segment.file_range();
                Some((segment.address()..segment.address().checked_add(size)?, offset))
            })
            .collect();
        let endian = elf.endian();
        let tls_bytes = elf
            .elf_program_headers()
            .iter()
            .find(|header| header.p_type(endian) == elf::PT_TLS)
            .map(|header| header.p_memsz(endian));
        let mut placement = Self {
            table: usize::try_from(start)?..usize::try_from(start.saturating_add(size))?,
            address,
            module_data: module_data(&elf, address, size),
            release: None,
            segments,
            tls_bytes,
        };
        placement.release =
            elf.section_by_name(BUILD_INFO_SECTION).and_then(|s| placement.release(s.data().ok()?, bytes));
        Ok(Some(placement))
    }

    /// Where the address `svma` is in the file, with at least `len` bytes there.
    pub(super) fn file_offset(&self, svma: u64, len: u64) -> Option<usize> {
        let (range, offset) = self.segments.iter().find(|(range, _)| range.contains(&svma))?;
        (svma.checked_add(len)? <= range.end).then_some(())?;
        usize::try_from(offset.checked_add(svma - range.start)?).ok()
    }

    /// The Go minor release that built it (26 for `go1.26.10`).
    pub(super) fn minor_release(&self) -> Option<u32> {
        let rest = self.release.as_deref()?.split("go1.").nth(1)?;
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        rest[..digits].parse().ok()
    }

    /// The release `.go.buildinfo` (`info`) names: inline since Go 1.18 (a varint-prefixed
    /// string after the header), else through a pointer to a Go string in the file (`bytes`).
    fn release(&self, info: &[u8], bytes: &[u8]) -> Option<String> {
        let header = info.get(..32)?;
        if !header.starts_with(BUILD_INFO_MAGIC) || header[14] != 8 || header[15] & 1 != 0 {
            return None;
        }
        let release = if header[15] & 2 != 0 {
            let mut rest = &info[32..];
            let len = usize::try_from(uvarint(&mut rest)?).ok()?;
            rest.get(..len.min(MAX_RELEASE))?
        } else {
            let string = self.file_offset(read_u64(header, 16)?, 16)?;
            let (pointer, len) =
                (read_u64(bytes, string)?, read_u64(bytes, string + 8)?.min(MAX_RELEASE as u64));
            let at = self.file_offset(pointer, len)?;
            bytes.get(at..at + len as usize)?
        };
        Some(String::from_utf8_lossy(release).into_owned())
    }
}

/// Where the table is: its address, and where it starts in the file and how long it is at most.
/// A binary that external linking made position-independent before Go 1.26 has it merged into
/// the data made read-only after relocation: it is found there by its header (any of the
/// layouts' magic, then padding, the x86-64 instruction quantum and pointer size), in a Go
/// binary (one with `.go.buildinfo`).
fn table(elf: &ElfFile64<'_, object::Endianness>) -> Result<Option<(u64, u64, u64)>> {
    if let Some(section) = SECTIONS.iter().find_map(|name| elf.section_by_name(name)) {
        let Some((start, size)) = section.file_range() else { bail!("Go's table has no bytes in the file") };
        return Ok(Some((section.address(), start, size)));
    }
    let (Some(_), Some(merged)) =
        (elf.section_by_name(BUILD_INFO_SECTION), elf.section_by_name(MERGED_SECTION))
    else {
        return Ok(None);
    };
    let (Some((start, size)), Ok(data)) = (merged.file_range(), merged.data()) else { return Ok(None) };
    let header = |word: &[u8; 8]| {
        word[1..] == [0xff, 0xff, 0xff, 0, 0, 1, 8] && [0xf0, 0xf1, 0xfa, 0xfb].contains(&word[0])
    };
    let Some(at) = data.as_chunks::<8>().0.iter().position(header) else {
        bail!("a Go binary whose table of functions was not found")
    };
    let at = 8 * at as u64;
    Ok(Some((merged.address() + at, start + at, size - at)))
}

/// The words of `runtime.firstmoduledata`: its own section's (Go 1.26 and later), else those
/// from the first 8-aligned place in Go's data sections that holds the table's address (`table`,
/// its first field, `table_size` bytes long), as far as [`MODULE_WORDS`] go.
fn module_data(elf: &ElfFile64<'_, object::Endianness>, table: u64, table_size: u64) -> Option<Vec<u64>> {
    let kept =
        |words: &[[u8; 8]]| -> Vec<u64> { words.iter().map(|word| u64::from_le_bytes(*word)).collect() };
    let from = |words: &[[u8; 8]], at: usize| words.get(at..at + MODULE_WORDS).map(kept);
    if let Some(section) = elf.section_by_name(MODULE_SECTION) {
        let words = section.data().ok()?.as_chunks::<8>().0;
        return (words.first().map(|word| u64::from_le_bytes(*word)) == Some(table))
            .then(|| from(words, 0))
            .flatten();
    }
    // The first place whose next word points into the table (its names): other words may hold
    // the table's address too. The section is searched in place, not copied.
    let inside = |word: u64| word > table && word - table < table_size;
    MODULE_DATA_SECTIONS.iter().find_map(|name| {
        let words = elf.section_by_name(name)?.data().ok()?.as_chunks::<8>().0;
        let at = words
            .windows(2)
            .position(|pair| u64::from_le_bytes(pair[0]) == table && inside(u64::from_le_bytes(pair[1])))?;
        from(words, at)
    })
}
