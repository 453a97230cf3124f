//! What the stages need to know of an ELF file a target maps, read once per file: its identity
//! (build id), where to find its separate debug file (`.gnu_debuglink`), what debug data it has,
//! and its load segments (file offset <-> the addresses its symbols and CFI speak in).
use object::{Object as _, ObjectSection as _, ObjectSegment as _, read::elf::ElfFile64};

use super::budget::{Budget, Charge};

/// Largest section a reader may inflate: a compressed section declares its own size, and a
/// crafted one could declare any.
pub(crate) const MAX_INFLATED_SECTION: u64 = 64 << 20;

/// Bytes of inflated sections held at once: CFI by the unwinder, DWARF by the symbolizer.
pub(crate) const INFLATED_BUDGET: u64 = 128 << 20;

/// The budget every inflated section is charged to.
pub(crate) static INFLATED: Budget = Budget::new(INFLATED_BUDGET);

/// Charges `bytes` of inflated section to `held` (the charge of everything a reader inflated
/// of one file): whether there was room.
pub(crate) fn charge_inflated(held: &mut Option<Charge>, bytes: u64) -> bool {
    match held {
        Some(charge) => charge.grow(bytes),
        None => {
            *held = INFLATED.charge(bytes);
            held.is_some()
        }
    }
}

/// DWARF sections other than `.debug_frame` (CFI, which the unwinder reads), compressed or not.
pub(super) fn is_dwarf(name: &[u8]) -> bool {
    (name.starts_with(b".debug_") && name != b".debug_frame") || name.starts_with(b".zdebug_")
}

/// One `PT_LOAD` segment: where a range of the file lives in the module's own address space
/// (its "stated virtual memory addresses", SVMAs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub file_offset: u64,
    pub file_size: u64,
    pub svma: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElfFacts {
    pub build_id: Option<Vec<u8>>,
    /// `.gnu_debuglink`: a debug file's name and the CRC32 of its content.
    pub debug_link: Option<(Vec<u8>, u32)>,
    /// DWARF debug information (`.debug_info`).
    pub has_dwarf: bool,
    /// Unwind information (`.eh_frame` or `.debug_frame`).
    pub has_cfi: bool,
    /// Sections that send a DWARF reader to another file (`.gnu_debuglink`,
    /// `.gnu_debugaltlink`, `.debug_sup`).
    pub links_elsewhere: bool,
    /// A compressed section declares more than [`MAX_INFLATED_SECTION`] bytes.
    pub inflates_too_much: bool,
    /// What its compressed DWARF sections declare they inflate to, in all.
    pub inflated_dwarf: u64,
    pub segments: Vec<Segment>,
}

impl ElfFacts {
    /// The facts of a 64-bit ELF image; `None` for anything else.
    pub fn read(image: &[u8]) -> Option<Self> {
        let elf = ElfFile64::<object::Endianness>::parse(image).ok()?;
        let has = |name: &str| elf.section_by_name(name).is_some();
        // Present with data: a copy leaves out the DWARF it has no room for, marked as such.
        let holds =
            |name: &str| elf.section_by_name(name).is_some_and(|section| section.file_range().is_some());
        let inflated = |section: &object::read::elf::ElfSection64<'_, '_, object::Endianness>| {
            section
                .compressed_data()
                .ok()
                .filter(|data| data.format != object::CompressionFormat::None)
                .map_or(0, |data| data.uncompressed_size)
        };
        let inflates_too_much = elf.sections().any(|section| inflated(&section) > MAX_INFLATED_SECTION);
        let inflated_dwarf = elf
            .sections()
            .filter(|section| section.name_bytes().is_ok_and(is_dwarf))
            .map(|section| inflated(&section))
            .fold(0u64, u64::saturating_add);
        Some(Self {
            build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
            debug_link: elf.gnu_debuglink().ok().flatten().map(|(name, crc)| (name.to_vec(), crc)),
            has_dwarf: holds(".debug_info"),
            has_cfi: has(".eh_frame") || has(".debug_frame"),
            links_elsewhere: has(".gnu_debuglink") || has(".gnu_debugaltlink") || has(".debug_sup"),
            inflates_too_much,
            inflated_dwarf,
            segments: elf
                .segments()
                .map(|segment| {
                    let (file_offset, file_size) = segment.file_range();
                    Segment { file_offset, file_size, svma: segment.address() }
                })
                .collect(),
        })
    }

    /// The SVMA of a file offset inside one of the load segments. The module base is computed
    /// from the program headers: `mapping start - mapping offset` only works when each
    /// segment's address equals its file offset.
    pub fn svma(&self, file_offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| (s.file_offset..s.file_offset.saturating_add(s.file_size)).contains(&file_offset))
            .and_then(|s| s.svma.checked_add(file_offset - s.file_offset))
    }

    /// The load bias of the file mapped at `start` from file offset `offset`, `len` bytes: what
    /// its stated addresses are moved by, from the load segment that mapping holds.
    pub fn load_bias(&self, start: u64, offset: u64, len: u64) -> Option<u64> {
        let segment = self
            .segments
            .iter()
            .find(|s| s.file_size > 0 && (offset..offset.saturating_add(len)).contains(&s.file_offset))?;
        let address_of_segment = start.checked_add(segment.file_offset - offset)?;
        Some(address_of_segment.wrapping_sub(segment.svma))
    }

    /// Whether a DWARF reader can be given this file alone: it sends the reader to no other
    /// file, and inflates nothing beyond bounds.
    pub fn dwarf_readable_alone(&self) -> bool {
        self.has_dwarf && !self.links_elsewhere && !self.inflates_too_much
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dwarf_sections_are_told_apart_from_cfi() {
        assert!(is_dwarf(b".debug_info") && is_dwarf(b".zdebug_line") && is_dwarf(b".debug_str"));
        assert!(!is_dwarf(b".debug_frame") && !is_dwarf(b".eh_frame") && !is_dwarf(b".symtab"));
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/fixtures/unwind/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    #[test]
    fn facts_of_the_fixture_binaries() {
        let facts = ElfFacts::read(&fixture("snapshot")).unwrap();
        assert!(facts.has_cfi && !facts.links_elsewhere && !facts.inflates_too_much);
        // Non-PIE: the text segment sits at 0x401000, file offset 0x1000.
        assert_eq!(facts.svma(0x1010), Some(0x401010));
        assert_eq!(facts.svma(0x10_0000), None);
        assert!(!ElfFacts::read(&fixture("snapshot-nocfi")).unwrap().has_cfi);
        assert_eq!(ElfFacts::read(b"not an ELF file"), None);
    }
}
