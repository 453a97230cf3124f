//! What a Perl executable or `libperl` says of itself, read once per file: its release, how its
//! code reaches the thread's interpreter (`PL_current_context`), and which of its code is the op
//! loop. Debian's `/usr/bin/perl` has the interpreter built in and exports its API, as every
//! `libperl.so` does (docs/perl-layouts.md §1).
use std::ops::Range;

use object::{
    Object as _, ObjectSymbol as _, ObjectSymbolTable as _, RelocationTarget,
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
        Self::Supported(Interpreter { release, context, runops: start..start + runops.size() })
    }
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
