//! Names for PLT stubs (`time@plt`).
//!
//! A call into a shared library goes through a stub in the caller's procedure linkage table: an
//! indirect jump through the function's GOT slot. Stubs have CFI but no symbols, so a symbolizer
//! names them after the nearest symbol before them (`_init`, usually): a loop calling a cheap
//! library function then shows its time in `_init`. As perf does, each stub is named after the
//! function it jumps to, found by decoding its jump and looking up the dynamic relocation that
//! fills the GOT slot it reads.
use std::collections::HashMap;

use object::{
    Architecture, Endianness, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget,
    read::elf::{ElfFile64, SectionHeader},
};

/// The x86-64 PLT sections: the lazy-binding `.plt`, the IBT `.plt.sec` and the eagerly bound
/// `.plt.got`. All hold fixed-size entries.
const PLT_SECTIONS: [&str; 3] = [".plt", ".plt.sec", ".plt.got"];

/// The smallest PLT entry there is (`.plt.got`'s), and the most stubs a section may hold.
const MIN_ENTRY_SIZE: u64 = 8;
const MAX_STUBS: u64 = 1 << 20;

/// `jmp *disp32(%rip)`: the stub's jump through its GOT slot.
const JUMP_THROUGH_GOT: [u8; 2] = [0xff, 0x25];

/// The PLT stubs of one module, by file offset.
#[derive(Debug, Default)]
pub struct PltStubs {
    /// Sorted by `start`, not overlapping.
    stubs: Vec<Stub>,
}

#[derive(Debug)]
struct Stub {
    start: u64,
    end: u64,
    /// `None` for code that jumps to no named slot: the lazy-binding header and entries.
    target: Option<String>,
}

impl PltStubs {
    /// The stubs of an x86-64 ELF image; none for anything else (or anything unreadable).
    pub fn parse(image: &[u8]) -> Self {
        let Ok(elf) = ElfFile64::<Endianness>::parse(image) else { return Self::default() };
        if elf.architecture() != Architecture::X86_64 {
            return Self::default();
        }
        let slots = got_slot_names(&elf);
        let mut stubs = Vec::new();
        for section in elf.sections().filter(|s| s.name().is_ok_and(|name| PLT_SECTIONS.contains(&name))) {
            let (Some((file_start, _)), Ok(code)) = (section.file_range(), section.data()) else { continue };
            let entry_size = match section.elf_section_header().sh_entsize(elf.endian()) {
                0 => 16,
                size => size,
            };
            // x86-64 PLT entries are 8 or 16 bytes; anything smaller would make a stub per byte.
            if entry_size < MIN_ENTRY_SIZE || code.len() as u64 / entry_size > MAX_STUBS {
                continue;
            }
            for (index, entry) in code.chunks(entry_size as usize).enumerate() {
                let at = index as u64 * entry_size;
                let target = got_slot_read_by(entry)
                    .and_then(|(jump_end, disp)| {
                        slots.get(&section.address().wrapping_add(at + jump_end).wrapping_add_signed(disp))
                    })
                    .map(|name| demangled(name));
                stubs.push(Stub {
                    start: file_start + at,
                    end: file_start + at + entry.len() as u64,
                    target,
                });
            }
        }
        stubs.sort_unstable_by_key(|stub| stub.start);
        Self { stubs }
    }

    /// The name of the code at `file_offset` when it is a PLT stub: `function@plt`, or `[plt]`
    /// for the lazy-binding code.
    pub fn name(&self, file_offset: u64) -> Option<String> {
        let index = self.stubs.partition_point(|stub| stub.start <= file_offset).checked_sub(1)?;
        let stub = &self.stubs[index];
        (file_offset < stub.end).then(|| match &stub.target {
            Some(function) => format!("{function}@plt"),
            None => "[plt]".to_owned(),
        })
    }
}

/// Symbol names by the GOT slot (virtual address) their dynamic relocation fills.
fn got_slot_names<'data>(elf: &ElfFile64<'data, Endianness>) -> HashMap<u64, &'data str> {
    let (Some(relocations), Some(symbols)) = (elf.dynamic_relocations(), elf.dynamic_symbol_table()) else {
        return HashMap::new();
    };
    relocations
        .filter_map(|(slot, relocation)| {
            let RelocationTarget::Symbol(index) = relocation.target() else { return None };
            let name = symbols.symbol_by_index(index).ok()?.name().ok()?;
            (!name.is_empty()).then_some((slot, name))
        })
        .collect()
}

/// The GOT slot an entry jumps through, as (offset in the entry where the jump ends, rip-relative
/// displacement).
fn got_slot_read_by(entry: &[u8]) -> Option<(u64, i64)> {
    let at = entry.windows(2).position(|opcode| opcode == JUMP_THROUGH_GOT)?;
    let disp = entry.get(at + 2..at + 6)?;
    Some(((at + 6) as u64, i32::from_le_bytes(disp.try_into().ok()?).into()))
}

/// Rust and C++ names demangled as blazesym does for symbols; others unchanged.
fn demangled(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|cpp| cpp.demangle().ok())
        .unwrap_or_else(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/fixtures/plt/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    /// File offsets of the stubs, as the fixture's `objdump -d` shows them.
    fn stub_names(image: &[u8], offsets: &[u64]) -> Vec<Option<String>> {
        let stubs = PltStubs::parse(image);
        offsets.iter().map(|&offset| stubs.name(offset)).collect()
    }

    #[test]
    fn lazy_binding_plt() {
        // .plt: header at 0x1020, then abs, strtod, time; .plt.got: __cxa_finalize at 0x1060.
        let names =
            stub_names(&fixture("calls"), &[0x1020, 0x102f, 0x1030, 0x103b, 0x1040, 0x1050, 0x105f, 0x1060]);
        let expected = [
            "[plt]",
            "[plt]",
            "abs@plt",
            "abs@plt",
            "strtod@plt",
            "time@plt",
            "time@plt",
            "__cxa_finalize@plt",
        ];
        assert_eq!(names, expected.map(|name| Some(name.to_owned())));
    }

    #[test]
    fn ibt_plt_sec() {
        // Calls go to .plt.sec (0x1070: abs, strtod, time); .plt holds the lazy-binding entries.
        let names = stub_names(&fixture("calls-ibt"), &[0x1070, 0x107f, 0x1080, 0x1090, 0x1030, 0x1060]);
        let expected = ["abs@plt", "abs@plt", "strtod@plt", "time@plt", "[plt]", "__cxa_finalize@plt"];
        assert_eq!(names, expected.map(|name| Some(name.to_owned())));
    }

    #[test]
    fn outside_the_plt() {
        let image = fixture("calls");
        assert_eq!(
            stub_names(&image, &[0x0, 0x1000, 0x1068, 0x10a0, u64::MAX]),
            [None, None, None, None, None]
        );
    }

    #[test]
    fn anything_else_has_no_stubs() {
        assert_eq!(PltStubs::parse(b"not an ELF file").name(0x1030), None);
        let mut truncated = fixture("calls");
        truncated.truncate(0x1040);
        assert!(PltStubs::parse(&truncated).stubs.is_empty());
    }

    #[test]
    fn mangled_targets_are_demangled() {
        assert_eq!(demangled("_ZNSo3putEc"), "std::ostream::put(char)");
        assert_eq!(demangled("malloc"), "malloc");
    }
}
