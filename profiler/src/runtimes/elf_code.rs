//! Reading a runtime's image for what its code says: bytes at an address the file states, the
//! file offset of one, and the extent of the function an unwind entry covers (runtimes find
//! what their images do not name through the code of what they do).
use std::ops::Range;

use gimli::UnwindSection as _;
use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SectionIndex, read::elf::ElfFile64};

use crate::untrusted::ElfFacts;

/// The `len` bytes at `svma` in its section's data.
pub(super) fn bytes_at<'data>(
    elf: &ElfFile64<'data, object::Endianness>,
    svma: u64,
    section: SectionIndex,
    len: usize,
) -> Option<&'data [u8]> {
    let section = elf.section_by_index(section).ok()?;
    let data = section.data().ok()?;
    let at = usize::try_from(svma.checked_sub(section.address())?).ok()?;
    data.get(at..at.checked_add(len)?)
}

/// The symbol `name` that `elf` defines for dynamic linking.
pub(super) fn exported<'data, 'file>(
    elf: &'file ElfFile64<'data, object::Endianness>,
    name: &str,
) -> Option<object::read::elf::ElfSymbol64<'data, 'file, object::Endianness>> {
    elf.dynamic_symbols().find(|symbol| {
        symbol.name() == Ok(name) && !symbol.is_undefined() && symbol.section_index().is_some()
    })
}

/// An image's unwind entries (FDEs), found by address through `.eh_frame_hdr`'s sorted table:
/// the few the eval loop jumps into are read, not the thousands of `.eh_frame`.
pub(super) struct UnwindEntries<'data> {
    eh_frame: gimli::EhFrame<gimli::EndianSlice<'data, gimli::LittleEndian>>,
    header: gimli::ParsedEhFrameHdr<gimli::EndianSlice<'data, gimli::LittleEndian>>,
    bases: gimli::BaseAddresses,
}

impl<'data> UnwindEntries<'data> {
    pub(super) fn of(elf: &ElfFile64<'data, object::Endianness>) -> Option<Self> {
        let eh_frame = elf.section_by_name(".eh_frame")?;
        let header = elf.section_by_name(".eh_frame_hdr")?;
        let bases = gimli::BaseAddresses::default()
            .set_eh_frame(eh_frame.address())
            .set_eh_frame_hdr(header.address());
        let header =
            gimli::EhFrameHdr::new(header.data().ok()?, gimli::LittleEndian).parse(&bases, 8).ok()?;
        Some(Self {
            eh_frame: gimli::EhFrame::new(eh_frame.data().ok()?, gimli::LittleEndian),
            header,
            bases,
        })
    }

    /// The address range of the entry that covers `address`. The table's pointer is turned into
    /// an offset here, checked: gimli's `fde_for_address` subtracts without a check, and the
    /// table is the target's.
    pub(super) fn covering(&self, address: u64) -> Option<Range<u64>> {
        let pointer = self.header.table()?.lookup(address, &self.bases).ok()?.direct().ok()?;
        let offset = pointer.checked_sub(self.header.eh_frame_ptr().direct().ok()?)?;
        let offset = gimli::EhFrameOffset(usize::try_from(offset).ok()?);
        let fde = self.eh_frame.fde_from_offset(&self.bases, offset, gimli::EhFrame::cie_from_offset).ok()?;
        let range = fde.initial_address()..fde.initial_address().checked_add(fde.len())?;
        range.contains(&address).then_some(range)
    }
}

/// The file offset of an address the file states, through its load segments.
pub(super) fn file_offset(facts: &ElfFacts, svma: u64) -> Option<u64> {
    facts
        .segments
        .iter()
        .find(|s| (s.svma..s.svma.saturating_add(s.file_size)).contains(&svma))
        .map(|s| svma - s.svma + s.file_offset)
}
