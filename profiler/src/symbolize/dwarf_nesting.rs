//! How deep a file's debug information nests, measured before blazesym reads it: blazesym
//! parses inlined functions recursively, one native stack frame per level, so a crafted file
//! nesting tens of thousands of levels (a few dozen KB) would overflow the stack, an abort no
//! handler can catch. The walk here keeps its depth in a counter, not in recursion.
use gimli::{DebugAbbrev, DebugInfo, EndianSlice, LittleEndian};
use object::{Object as _, ObjectSection as _, read::elf::ElfFile64};

/// Deepest nesting of debugging entries a file may have for blazesym to read it. Real code
/// nests a few dozen levels (inlined calls inside lexical blocks inside functions); at this
/// depth blazesym's recursion stays within a thread's default stack.
pub(super) const MAX_NESTING: usize = 1000;

/// Why a file's debug information is not given to blazesym.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// It nests deeper than [`MAX_NESTING`].
    TooDeep,
    /// It cannot be walked: a reader could go anywhere from an entry that does not parse.
    Malformed,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooDeep => write!(f, "debug info nests more than {MAX_NESTING} levels deep"),
            Self::Malformed => f.write_str("debug info is malformed"),
        }
    }
}

/// Checks the `.debug_info` of a 64-bit little-endian ELF image. An image without debug
/// information passes (there is nothing for blazesym to recurse into).
pub(super) fn check(image: &[u8]) -> Result<(), Refusal> {
    let elf = ElfFile64::<object::Endianness>::parse(image).map_err(|_| Refusal::Malformed)?;
    let section = |name: &str| {
        elf.section_by_name(name)
            .map(|section| section.uncompressed_data())
            .transpose()
            .map_err(|_| Refusal::Malformed)
    };
    let Some(info) = section(".debug_info")? else { return Ok(()) };
    let abbrev = section(".debug_abbrev")?.unwrap_or_default();
    check_sections(&info, &abbrev)
}

/// Checks every unit of `.debug_info` against [`MAX_NESTING`], stopping at the first too deep.
pub(super) fn check_sections(info: &[u8], abbrev: &[u8]) -> Result<(), Refusal> {
    let info = DebugInfo::new(info, LittleEndian);
    let abbrev = DebugAbbrev::new(abbrev, LittleEndian);
    let mut units = info.units();
    while let Some(header) = units.next().map_err(|_| Refusal::Malformed)? {
        let abbreviations = header.abbreviations(&abbrev).map_err(|_| Refusal::Malformed)?;
        deepest(header.entries_raw(&abbreviations, None).map_err(|_| Refusal::Malformed)?)?;
    }
    Ok(())
}

/// Walks a unit's entries in order: an entry with children opens a level, a null entry closes
/// one. Attributes are skipped, not parsed.
fn deepest(mut entries: gimli::EntriesRaw<'_, EndianSlice<'_, LittleEndian>>) -> Result<(), Refusal> {
    let mut depth = 0usize;
    while !entries.is_empty() {
        match entries.read_abbreviation().map_err(|_| Refusal::Malformed)? {
            Some(abbreviation) => {
                entries.skip_attributes(abbreviation.attributes()).map_err(|_| Refusal::Malformed)?;
                if abbreviation.has_children() {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(Refusal::TooDeep);
                    }
                }
            }
            None => depth = depth.saturating_sub(1),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DWARF 4 unit: a compile unit holding `depth` entries each inside the one before, and
    /// the abbreviations it uses (no attributes: nesting is all that is measured).
    fn nested(depth: usize) -> (Vec<u8>, Vec<u8>) {
        // Code 1: compile unit with children; code 2: inlined subroutine with children.
        let abbrev = vec![1, 0x11, 1, 0, 0, 2, 0x1d, 1, 0, 0, 0];
        let mut body = vec![4, 0, 0, 0, 0, 0, 8, 1];
        body.extend(std::iter::repeat_n(2, depth));
        body.extend(std::iter::repeat_n(0, depth + 1));
        let mut info = (body.len() as u32).to_le_bytes().to_vec();
        info.extend(body);
        (info, abbrev)
    }

    #[test]
    fn nesting_up_to_the_limit_is_read() {
        // The compile unit is one level: MAX_NESTING - 1 entries inside it reach the limit.
        let (info, abbrev) = nested(MAX_NESTING - 1);
        assert_eq!(check_sections(&info, &abbrev), Ok(()));
    }

    #[test]
    fn nesting_beyond_the_limit_is_refused() {
        let (info, abbrev) = nested(MAX_NESTING);
        assert_eq!(check_sections(&info, &abbrev), Err(Refusal::TooDeep));
        let (info, abbrev) = nested(20_000);
        assert_eq!(check_sections(&info, &abbrev), Err(Refusal::TooDeep));
    }

    #[test]
    fn a_deep_unit_after_a_shallow_one_is_found() {
        let (mut info, abbrev) = nested(3);
        info.extend(nested(5_000).0);
        assert_eq!(check_sections(&info, &abbrev), Err(Refusal::TooDeep));
    }

    #[test]
    fn an_entry_that_does_not_parse_is_refused() {
        let (mut info, abbrev) = nested(3);
        // Abbreviation code 9 is not declared.
        info[12] = 9;
        assert_eq!(check_sections(&info, &abbrev), Err(Refusal::Malformed));
        assert_eq!(check(b"not an ELF file"), Err(Refusal::Malformed));
    }

    #[test]
    fn real_debug_info_passes() {
        let image =
            std::fs::read(format!("{}/tests/fixtures/unwind/snapshot", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert_eq!(check(&image), Ok(()));
    }
}
