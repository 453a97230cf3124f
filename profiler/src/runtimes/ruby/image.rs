//! What a libruby (or a `ruby` executable with the VM linked in) says of itself, read once per
//! file: its release, and where the variables the walk starts from are. Debian's 3.1 exports
//! most of them; its 3.3 exports none, so they are found, in every release alike, through the
//! code of exported functions that use them (docs/ruby-layouts.md §1.3), each checked against
//! what the file says of the address found.
use std::ops::Range;

use anyhow::{Context as _, Result};
use object::{
    Object as _, ObjectSection as _, ObjectSymbol as _, ObjectSymbolTable as _, RelocationTarget,
    SectionKind, read::elf::ElfFile64,
};

use super::layout::{self, Layout};
use crate::{
    runtimes::elf_code::{UnwindEntries, bytes_at, exported, file_offset},
    untrusted::ElfFacts,
};

/// A Ruby VM this profiler reads. Addresses are as the file states them (add the load bias).
#[derive(Debug)]
pub(crate) struct Vm {
    /// `ruby_version`: "3.3.8".
    pub(super) release: String,
    pub(super) layout: &'static Layout,
    /// The GOT pair through which the VM reaches `ruby_current_ec` (general-dynamic TLS): its
    /// first word is the module's TLS id once loaded.
    pub(super) ec_got: u64,
    /// Where `ruby_current_ec` is in the module's TLS block.
    pub(super) ec_in_block: u64,
    /// `ruby_current_vm_ptr`.
    pub(super) vm_ptr: u64,
    /// `ruby_global_symbols`: names of IDs.
    pub(super) global_symbols: u64,
    /// `rb_vm_exec`, as file offsets: each native call of it runs a run of Ruby frames.
    pub(super) vm_exec: Range<u64>,
}

/// What a file is, as far as Ruby goes.
pub(crate) enum Image {
    NotRuby,
    /// A Ruby VM this profiler does not read: what it is, for the summary.
    Unsupported(String),
    Supported(Vm),
}

type Elf<'data> = ElfFile64<'data, object::Endianness>;

impl Image {
    pub(crate) fn read(bytes: &[u8], facts: &ElfFacts) -> Self {
        let Ok(elf) = Elf::parse(bytes) else { return Self::NotRuby };
        let Some(release) = exported(&elf, "ruby_version").and_then(|symbol| string_at(&elf, &symbol)) else {
            return Self::NotRuby;
        };
        let Some(layout) = release_minor(&release).and_then(|(major, minor)| layout::layout(major, minor))
        else {
            return Self::Unsupported(format!("Ruby {release}"));
        };
        match read_vm(&elf, facts, release.clone(), layout) {
            Ok(vm) => Self::Supported(vm),
            Err(error) => Self::Unsupported(format!("Ruby {release}: {error:#}")),
        }
    }
}

fn read_vm(elf: &Elf<'_>, facts: &ElfFacts, release: String, layout: &'static Layout) -> Result<Vm> {
    let (ec_got, ec_in_block) = current_ec(elf).context("where ruby_current_ec is not found")?;
    let vm_ptr = match exported(elf, "ruby_current_vm_ptr") {
        Some(symbol) => symbol.address(),
        None => vm_ptr_from_code(elf).context("ruby_current_vm_ptr is not found")?,
    };
    let global_symbols = global_symbols(elf).context("ruby_global_symbols is not found")?;
    let vm_exec = match exported(elf, "rb_vm_exec") {
        Some(symbol) if symbol.size() > 0 => symbol.address()..symbol.address() + symbol.size(),
        _ => vm_exec_from_code(elf).context("rb_vm_exec is not found")?,
    };
    let start = file_offset(facts, vm_exec.start).context("rb_vm_exec is in no load segment")?;
    let vm_exec = start..start + (vm_exec.end - vm_exec.start);
    Ok(Vm { release, layout, ec_got, ec_in_block, vm_ptr, global_symbols, vm_exec })
}

/// The major and minor numbers of a release ("3.3.8").
fn release_minor(release: &str) -> Option<(u32, u32)> {
    let mut numbers = release.split('.').map(str::parse::<u32>);
    Some((numbers.next()?.ok()?, numbers.next()?.ok()?))
}

/// The NUL-terminated string a symbol of at most 32 bytes holds.
fn string_at(
    elf: &Elf<'_>,
    symbol: &object::read::elf::ElfSymbol64<'_, '_, object::Endianness>,
) -> Option<String> {
    let len = usize::try_from(symbol.size()).ok().filter(|&len| (1..=32).contains(&len))?;
    let bytes = bytes_at(elf, symbol.address(), symbol.section_index()?, len)?;
    let text = bytes.split(|&b| b == 0).next()?;
    std::str::from_utf8(text)
        .ok()
        .filter(|text| text.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
}

/// The first `len` bytes of the exported function `name`.
fn code_of<'data>(elf: &Elf<'data>, name: &str, len: usize) -> Option<(u64, &'data [u8])> {
    let symbol = exported(elf, name).filter(|symbol| symbol.kind() == object::SymbolKind::Text)?;
    let len = len.min(usize::try_from(symbol.size()).ok()?);
    Some((symbol.address(), bytes_at(elf, symbol.address(), symbol.section_index()?, len)?))
}

/// Skips an `endbr64` at the start of a function.
fn past_endbr(code: &[u8]) -> (u64, &[u8]) {
    match code {
        [0xf3, 0x0f, 0x1e, 0xfa, rest @ ..] => (4, rest),
        _ => (0, code),
    }
}

/// The target of the RIP-relative operand whose 4 displacement bytes start at `at` of `code`
/// (which is at `address`), in an instruction ending `tail` bytes after them.
fn rip_target(address: u64, code: &[u8], at: usize, tail: usize) -> Option<u64> {
    let displacement = i32::from_le_bytes(code.get(at..at + 4)?.try_into().ok()?);
    (address + (at + 4 + tail) as u64).checked_add_signed(i64::from(displacement))
}

/// `ruby_current_ec`'s GOT pair and its offset in the TLS block. `rb_thread_current` starts by
/// reaching it the one way the ABI allows general-dynamic TLS (`data16 lea pair(%rip), %rdi;
/// data16 data16 rex.W call __tls_get_addr`); the pair's second word is the offset, relocated
/// against the symbol where it is exported (3.1), or in the file where it is not (3.3).
fn current_ec(elf: &Elf<'_>) -> Option<(u64, u64)> {
    let (address, code) = code_of(elf, "rb_thread_current", 32)?;
    let (skipped, code) = past_endbr(code);
    let address = address + skipped;
    let at = code.windows(4).take(8).position(|w| w == [0x66, 0x48, 0x8d, 0x3d])?;
    if code.get(at + 8..at + 12)? != [0x66, 0x66, 0x48, 0xe8] {
        return None;
    }
    let pair = rip_target(address, code, at + 4, 0)?;
    let relocation_of = |offset: u64| {
        elf.dynamic_relocations()?.find(|(at, _)| *at == offset).map(|(_, relocation)| relocation)
    };
    let module = relocation_of(pair)?;
    if module.flags() != (object::RelocationFlags::Elf { r_type: object::elf::R_X86_64_DTPMOD64 }) {
        return None;
    }
    let in_block = match relocation_of(pair + 8) {
        Some(relocation) => {
            let base = match relocation.target() {
                RelocationTarget::Symbol(index) => {
                    elf.dynamic_symbol_table()?.symbol_by_index(index).ok()?.address()
                }
                _ => 0,
            };
            base.checked_add_signed(relocation.addend())?
        }
        None => u64::from_le_bytes(word_at(elf, pair + 8)?),
    };
    Some((pair, in_block))
}

/// The 8 bytes the file holds at `address`.
fn word_at(elf: &Elf<'_>, address: u64) -> Option<[u8; 8]> {
    let section = elf
        .sections()
        .find(|section| (section.address()..section.address() + section.size()).contains(&address))?;
    bytes_at(elf, address, section.index(), 8)?.try_into().ok()
}

/// Whether `address` is in a section of writable data (where the VM's globals are).
fn in_data(elf: &Elf<'_>, address: u64) -> bool {
    elf.sections().any(|section| {
        matches!(section.kind(), SectionKind::Data | SectionKind::UninitializedData)
            && (section.address()..section.address() + section.size()).contains(&address)
            && !section.name().is_ok_and(|name| name.starts_with(".got"))
    })
}

/// `ruby_current_vm_ptr`, from `ruby_vm_at_exit`, which loads it first (`mov vm(%rip), reg`).
fn vm_ptr_from_code(elf: &Elf<'_>) -> Option<u64> {
    let (address, code) = code_of(elf, "ruby_vm_at_exit", 48)?;
    let at = (0..code.len().saturating_sub(7))
        .find(|&at| matches!(code[at..], [0x48 | 0x4c, 0x8b, modrm, ..] if modrm & 0xc7 == 0x05))?;
    let target = rip_target(address, code, at + 3, 0)?;
    in_data(elf, target).then_some(target)
}

/// `ruby_global_symbols`, from the ID lookup `rb_id2str` tail-calls: it compares the serial with
/// the table's `last_id` (its first field, `cmp %edi, last_id(%rip)`) and then loads its `ids`
/// (16 bytes on, `mov ids(%rip), %rdi`). Both must agree.
fn global_symbols(elf: &Elf<'_>) -> Option<u64> {
    let (address, code) = code_of(elf, "rb_id2str", 32)?;
    let lookup = jump_targets(address, code).next()?;
    let section = elf.sections().find(|s| (s.address()..s.address() + s.size()).contains(&lookup))?;
    let code = bytes_at(elf, lookup, section.index(), 160)?;
    (0..code.len().saturating_sub(6)).find_map(|at| {
        if code[at..at + 2] != [0x39, 0x3d] {
            return None;
        }
        let last_id = rip_target(lookup, code, at + 2, 0)?;
        let loads_ids = (at + 6..(at + 32).min(code.len().saturating_sub(7))).any(|load| {
            code[load..load + 3] == [0x48, 0x8b, 0x3d]
                && rip_target(lookup, code, load + 3, 0) == Some(last_id + 16)
        });
        (loads_ids && in_data(elf, last_id)).then_some(last_id)
    })
}

/// The targets of what look like `jmp rel32` in `code` (at `address`), in order.
fn jump_targets(address: u64, code: &[u8]) -> impl Iterator<Item = u64> + '_ {
    (0..code.len())
        .filter(move |&at| code[at] == 0xe9)
        .filter_map(move |at| rip_target(address, code, at + 1, 0))
}

/// `rb_vm_exec`, which `rb_iseq_eval_main` ends by jumping to: the one target of its jumps that
/// starts a function of its own (an unwind entry), outside it; its extent is that entry's.
fn vm_exec_from_code(elf: &Elf<'_>) -> Option<Range<u64>> {
    let (address, code) = code_of(elf, "rb_iseq_eval_main", 512)?;
    let unwind = UnwindEntries::of(elf)?;
    let own = address..address + code.len() as u64;
    let mut entries = jump_targets(address, code)
        .filter(|target| !own.contains(target))
        .filter_map(|target| unwind.covering(target).filter(|entry| entry.start == target));
    let entry = entries.next()?;
    entries.all(|other| other == entry).then_some(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_give_their_minor() {
        assert_eq!(release_minor("3.3.8"), Some((3, 3)));
        assert_eq!(release_minor("3.1.2"), Some((3, 1)));
        assert_eq!(release_minor("x"), None);
    }

    #[test]
    fn jumps_are_found_by_their_encoding() {
        // 3.3's `rb_iseq_eval_main` at 0x2855fb: `jmp 0x284aa0`.
        let code = [0x90, 0xe9, 0xa0, 0xf4, 0xff, 0xff];
        assert_eq!(jump_targets(0x2855fa, &code).collect::<Vec<_>>(), [0x284aa0]);
    }

    #[test]
    fn rip_relative_operands_are_resolved_from_the_instruction_end() {
        // 3.3's `ruby_vm_at_exit` at 0x278052: `mov 0x1f8b8f(%rip), %rbx` reads 0x470be8.
        let code = [0x48, 0x8b, 0x1d, 0x8f, 0x8b, 0x1f, 0x00];
        assert_eq!(rip_target(0x278052, &code, 3, 0), Some(0x470be8));
    }
}
