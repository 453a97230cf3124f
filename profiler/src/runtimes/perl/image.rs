//! What a Perl executable or `libperl` says of itself, read once per file: its release, how its
//! code reaches the thread's interpreter (`PL_current_context`), and which of its code is the op
//! loop. Debian's `/usr/bin/perl` has the interpreter built in and exports its API, as every
//! `libperl.so` does (docs/perl-layouts.md §1).
use std::ops::Range;

use object::{
    Object as _, ObjectSection as _, ObjectSymbol as _, ObjectSymbolTable as _, RelocationTarget,
    SectionKind,
    elf::PT_TLS,
    read::elf::{ElfFile64, ProgramHeader as _},
};

use crate::{
    runtimes::elf_code::{bytes_at, exported, file_offset},
    untrusted::ElfFacts,
};

/// A Perl this profiler reads. Addresses are as the file states them (add the load bias).
#[derive(Debug)]
pub(crate) struct Interpreter {
    /// "5.36.0".
    pub(super) release: String,
    pub(super) context: ThreadContext,
    /// `Perl_runops_standard`, as file offsets: each native call of it runs a run of Perl frames.
    pub(super) runops: Range<u64>,
    /// The calls of the op loop in `S_docatch`, as file offsets: a loop entered there runs on the
    /// frames of the loop it was entered from (docs/perl-layouts.md §5).
    pub(super) docatch_calls: Vec<Range<u64>>,
}

/// How the code reaches `PL_current_context`, a thread-local variable: where the loader writes
/// what says where it is.
#[derive(Debug)]
pub(super) enum ThreadContext {
    /// The executable's own (initial-exec): the GOT word the loader sets to its offset from the
    /// thread pointer.
    Executable { got: u64 },
    /// A library's (general-dynamic): the GOT pair the loader sets to the library's TLS module id
    /// and the variable's offset in the module's block, and the size of that block, aligned.
    Library { got: u64, block_bytes: u64 },
}

/// What a file is, as far as Perl goes.
pub(crate) enum Image {
    NotPerl,
    /// A Perl this profiler does not read: what it is, for the summary.
    Unsupported(String),
    Supported(Interpreter),
}

/// The releases read: the same layouts from 5.36 (the first with `PL_current_context`) to 5.42.
const MINORS_READ: std::ops::RangeInclusive<u8> = 36..=42;

type Elf<'data> = ElfFile64<'data, object::Endianness>;

impl Image {
    pub(crate) fn read(bytes: &[u8], facts: &ElfFacts) -> Self {
        let Ok(elf) = Elf::parse(bytes) else { return Self::NotPerl };
        let Some(runops) = exported(&elf, "Perl_runops_standard") else { return Self::NotPerl };
        let Some((major, minor, patch)) = release(&elf) else {
            return Self::Unsupported("Perl of an unknown release".into());
        };
        let release = format!("{major}.{minor}.{patch}");
        if major != 5 || !MINORS_READ.contains(&minor) {
            return Self::Unsupported(format!("Perl {release}"));
        }
        let Some(context) = thread_context(&elf) else {
            return Self::Unsupported(format!(
                "Perl {release}, built without ithreads' thread-local context"
            ));
        };
        let Some(start) = file_offset(facts, runops.address()).filter(|_| runops.size() > 0) else {
            return Self::Unsupported(format!("Perl {release}: Perl_runops_standard is in no load segment"));
        };
        let docatch_calls = docatch_calls(&elf)
            .into_iter()
            .filter_map(|call| Some(file_offset(facts, call.start)?..file_offset(facts, call.end)?))
            .collect();
        Self::Supported(Interpreter { release, context, runops: start..start + runops.size(), docatch_calls })
    }
}

/// Bytes of a function read for its calls of the op loop at most.
const MAX_FUNCTION_BYTES: usize = 1 << 14;
/// How far before a call of the op loop `S_docatch` sets the first op.
const FIRST_OP_BEFORE: usize = 32;

/// The calls of the op loop in `S_docatch`, a hidden function: the calls through the
/// interpreter's `PL_runops` that follow a store of what an indirect call returned into `PL_op`
/// (`PL_op = firstpp(aTHX)`), which the other callers of the loop (`perl_run`, `call_sv`, the
/// sort's comparators, …) do not make. `PL_runops`'s place in the interpreter is where both
/// `perl_run` and `Perl_call_sv` call through.
fn docatch_calls(elf: &Elf<'_>) -> Vec<Range<u64>> {
    let code_of = |name: &str| {
        let symbol = exported(elf, name)?;
        let len = usize::try_from(symbol.size()).ok()?.min(MAX_FUNCTION_BYTES);
        bytes_at(elf, symbol.address(), symbol.section_index()?, len)
    };
    let (Some(run), Some(call_sv)) = (code_of("perl_run"), code_of("Perl_call_sv")) else {
        return Vec::new();
    };
    let in_call_sv: Vec<u32> = loop_calls(call_sv, None).map(|(_, offset)| offset).collect();
    let mut offsets: Vec<u32> = loop_calls(run, None)
        .map(|(_, offset)| offset)
        .filter(|offset| in_call_sv.contains(offset))
        .collect();
    offsets.dedup();
    let [runops] = offsets[..] else { return Vec::new() };
    elf.sections()
        .filter(|section| section.kind() == SectionKind::Text)
        .filter_map(|section| Some((section.address(), section.data().ok()?)))
        .flat_map(|(address, code)| {
            loop_calls(code, Some(runops))
                .filter(|&(at, _)| sets_first_op(&code[at.saturating_sub(FIRST_OP_BEFORE)..at]))
                .map(move |(at, _)| address + at as u64..address + (at + CALL_BYTES) as u64)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Bytes of `call *disp32(%reg)`: `ff`, its ModRM, the displacement.
const CALL_BYTES: usize = 6;

/// The calls through a field of a register's structure (`call *disp32(%reg)`) in `code`: where
/// each starts and its field's offset, only those at `offset` if given.
fn loop_calls(code: &[u8], offset: Option<u32>) -> impl Iterator<Item = (usize, u32)> + '_ {
    code.windows(CALL_BYTES).enumerate().filter_map(move |(at, bytes)| {
        // ModRM 10 010 rrr: an indirect call, a 32-bit displacement, a base register other than
        // the stack pointer's (which needs an SIB byte).
        let field = u32::from_le_bytes(bytes[2..].try_into().ok()?);
        (bytes[0] == 0xff && bytes[1] & 0xf8 == 0x90 && bytes[1] != 0x94 && offset.is_none_or(|o| o == field))
            .then_some((at, field))
    })
}

/// Whether `code` holds a store of `%rax` into the interpreter's `PL_op` (`mov %rax, 8(%reg)`)
/// just after an indirect call (`call *%reg`, or through a register's or the stack's field).
fn sets_first_op(code: &[u8]) -> bool {
    (4..code.len().saturating_sub(3)).any(|at| {
        let store = matches!(code[at..at + 4], [0x48 | 0x49, 0x89, 0x40..=0x47, 0x08]);
        let call = matches!(code[at - 2..at], [0xff, 0xd0..=0xd7])
            || matches!(code[at - 3..at], [0xff, 0x50..=0x57, _] if code[at - 2] != 0x54)
            || matches!(code[at - 4..at], [0xff, 0x54, 0x24, _]);
        store && call
    })
}

/// `PL_revision`, `PL_version` and `PL_subversion`: one byte each, in the file.
fn release(elf: &Elf<'_>) -> Option<(u8, u8, u8)> {
    let byte = |name: &str| {
        let symbol = exported(elf, name)?;
        bytes_at(elf, symbol.address(), symbol.section_index()?, 1).map(|bytes| bytes[0])
    };
    Some((byte("PL_revision")?, byte("PL_version")?, byte("PL_subversion")?))
}

/// How the file's code reaches `PL_current_context`: by the relocation the loader resolves it
/// with.
fn thread_context(elf: &Elf<'_>) -> Option<ThreadContext> {
    let symbols = elf.dynamic_symbol_table()?;
    let (got, r_type) = elf.dynamic_relocations()?.find_map(|(at, relocation)| {
        let RelocationTarget::Symbol(index) = relocation.target() else { return None };
        let symbol = symbols.symbol_by_index(index).ok()?;
        let object::RelocationFlags::Elf { r_type } = relocation.flags() else { return None };
        (symbol.name() == Ok("PL_current_context")).then_some((at, r_type))
    })?;
    match r_type {
        object::elf::R_X86_64_TPOFF64 => Some(ThreadContext::Executable { got }),
        object::elf::R_X86_64_DTPMOD64 => {
            let endian = elf.endian();
            let tls = elf.elf_program_headers().iter().find(|header| header.p_type(endian) == PT_TLS)?;
            let (size, align) = (tls.p_memsz(endian), tls.p_align(endian).max(1));
            Some(ThreadContext::Library { got, block_bytes: size.checked_next_multiple_of(align)? })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_op_is_what_an_indirect_call_returned() {
        // 5.36: call *%rax; mov %rax,0x8(%rbx). 5.42: call *0x18(%rsp); mov %rax,0x8(%rbx).
        assert!(sets_first_op(&[0x90, 0x90, 0xff, 0xd0, 0x48, 0x89, 0x43, 0x08, 0x90]));
        assert!(sets_first_op(&[0x90, 0xff, 0x54, 0x24, 0x18, 0x48, 0x89, 0x43, 0x08, 0x90]));
        // mov 0x718(%rdx),%rax; mov %rax,0x8(%rdx): a load, as a sort's comparator sets it.
        assert!(!sets_first_op(&[0x48, 0x8b, 0x82, 0x18, 0x07, 0, 0, 0x48, 0x89, 0x42, 0x08, 0x90]));
    }

    #[test]
    fn calls_through_a_field_are_found_with_its_offset() {
        let code = [0x90, 0xff, 0x93, 0xf0, 0x08, 0, 0, 0xff, 0x94, 0x24, 0, 0, 0, 0];
        assert_eq!(loop_calls(&code, None).collect::<Vec<_>>(), [(1, 0x8f0)]);
        assert_eq!(loop_calls(&code, Some(0x818)).count(), 0);
    }
}
