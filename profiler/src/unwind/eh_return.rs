//! Frames of the functions that return through `__builtin_eh_return`: libgcc's
//! `_Unwind_RaiseException`, `_Unwind_Resume`, `_Unwind_Resume_or_Rethrow` and
//! `_Unwind_ForcedUnwind`, where every C++ exception passes.
//!
//! Such a function ends by copying the landing pad's registers over its own saved ones and its
//! return address (`uw_install_context`), then loads them and jumps. From the copy on, its CFI
//! leads into the frame that catches, at the wrong stack pointer, and every frame in between (the
//! thrower, `__cxa_throw`) is lost; in the last instructions the return address is in a register
//! that samples do not carry. But the function keeps the context of its own frame on its stack
//! (`this_context`), laid out as libgcc's `struct _Unwind_Context` has been for decades: `cfa`,
//! `ra`, `lsda`, then `bases` (`tbase`, `dbase`, `func`). That context gives the caller back.
use std::ops::Range;

use framehop::ExplicitModuleSectionInfo;
use gimli::{
    BaseAddresses, CallFrameInstruction, CfaRule, CieOrFde, DebugFrame, EhFrame, EndianSlice,
    FrameDescriptionEntry, LittleEndian, Register, UnwindContext, UnwindOffset, UnwindSection,
};

use super::StackSnapshot;

/// DWARF numbers of the x86-64 registers that matter here.
const RDX: Register = Register(1);
const RAX: Register = Register(0);
const RBP: Register = Register(6);
const RSP: Register = Register(7);

/// The functions of a module that return through `__builtin_eh_return`, sorted.
#[derive(Debug, Default)]
pub(super) struct EhReturnFunctions(Vec<Function>);

#[derive(Debug)]
struct Function {
    /// SVMAs of its code.
    range: Range<u64>,
    /// Where it jumps to the landing pad: from the row whose CFA is neither `rsp` nor `rbp`
    /// based (the stack pointer about to be switched) until the CFA is `rbp` based again.
    jumping: Vec<Range<u64>>,
}

/// Where a frame of such a function is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EhReturnFrame {
    /// The SVMA of the function's first instruction.
    pub start: u64,
    /// In the jump to the landing pad (meaningful for the innermost frame).
    pub jumping: bool,
}

impl EhReturnFunctions {
    /// Finds them in a module's CFI: the functions whose CFI saves `rax` or `rdx`, the
    /// registers `__builtin_eh_return` hands the exception to the landing pad in. Nothing else
    /// saves them (they are call-clobbered), which identifies libgcc's unwinder without its
    /// symbols.
    pub(super) fn find(sections: &ExplicitModuleSectionInfo<Vec<u8>>) -> Self {
        let mut bases = BaseAddresses::default();
        if let Some(text) = &sections.text_svma {
            bases = bases.set_text(text.start);
        }
        if let Some(eh_frame) = &sections.eh_frame_svma {
            bases = bases.set_eh_frame(eh_frame.start);
        }
        let mut functions = match (&sections.eh_frame, &sections.debug_frame) {
            (Some(eh_frame), _) => find_in(&EhFrame::new(eh_frame, LittleEndian), &bases),
            (None, Some(debug_frame)) => find_in(&DebugFrame::new(debug_frame, LittleEndian), &bases),
            (None, None) => Vec::new(),
        };
        functions.sort_by_key(|function| function.range.start);
        Self(functions)
    }

    /// The function at `svma`, if it is one of them.
    pub(super) fn at(&self, svma: u64) -> Option<EhReturnFrame> {
        let after = self.0.partition_point(|function| function.range.start <= svma);
        let function = self.0.get(after.checked_sub(1)?)?;
        function.range.contains(&svma).then(|| EhReturnFrame {
            start: function.range.start,
            jumping: function.jumping.iter().any(|rows| rows.contains(&svma)),
        })
    }
}

/// The functions of `section` that save `rax` or `rdx`. Entries that do not parse are skipped.
fn find_in<'a, S>(section: &S, bases: &BaseAddresses) -> Vec<Function>
where
    S: UnwindSection<EndianSlice<'a, LittleEndian>>,
    S::Offset: UnwindOffset,
{
    let mut functions = Vec::new();
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(S::cie_from_offset) else { continue };
        if saves_eh_data(section, bases, &fde) {
            let range = fde.initial_address()..fde.end_address();
            functions.push(Function { range, jumping: jumping_rows(section, bases, &fde) });
        }
    }
    functions
}

fn saves_eh_data<'a, S: UnwindSection<EndianSlice<'a, LittleEndian>>>(
    section: &S,
    bases: &BaseAddresses,
    fde: &FrameDescriptionEntry<EndianSlice<'a, LittleEndian>>,
) -> bool {
    let mut instructions = fde.instructions(section, bases);
    while let Ok(Some(instruction)) = instructions.next() {
        if let CallFrameInstruction::Offset { register, .. }
        | CallFrameInstruction::OffsetExtendedSf { register, .. } = instruction
            && (register == RAX || register == RDX)
        {
            return true;
        }
    }
    false
}

fn jumping_rows<'a, S: UnwindSection<EndianSlice<'a, LittleEndian>>>(
    section: &S,
    bases: &BaseAddresses,
    fde: &FrameDescriptionEntry<EndianSlice<'a, LittleEndian>>,
) -> Vec<Range<u64>> {
    let mut context = Box::new(UnwindContext::new());
    let Ok(mut rows) = fde.rows(section, bases, &mut context) else { return Vec::new() };
    let mut jumping = Vec::new();
    let mut in_jump = false;
    while let Ok(Some(row)) = rows.next_row() {
        in_jump = match row.cfa() {
            CfaRule::RegisterAndOffset { register, .. } if *register == RBP => false,
            CfaRule::RegisterAndOffset { register, .. } if *register == RSP => in_jump,
            _ => true,
        };
        if in_jump {
            jumping.push(row.start_address()..row.end_address());
        }
    }
    jumping
}

/// Where a frame returns to, and its caller's stack pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Caller {
    pub return_address: u64,
    pub cfa: u64,
}

/// The contexts on the stack above `sp` (the frame of a function starting at `function`, a
/// real address) that describe that function's own frame: `func` is the function, the CFA lies
/// above the context. Lowest first; the caller keeps the first whose return address is code.
pub(super) fn own_contexts<'a>(
    stack: &'a StackSnapshot<'_>,
    sp: u64,
    function: u64,
) -> impl Iterator<Item = Caller> + 'a {
    /// Offsets in `struct _Unwind_Context` from `cfa`.
    const RA: u64 = 8;
    const FUNC: u64 = 5 * 8;
    /// How far above the stack pointer the context may be: libgcc's frames take about 1 KiB.
    const SEARCHED: u64 = 16 * 1024;
    let first = sp.checked_next_multiple_of(8).unwrap_or(u64::MAX);
    (first..first.saturating_add(SEARCHED))
        .step_by(8)
        .map_while(move |at| stack.read_u64(at).map(|cfa| (at, cfa)))
        .filter_map(move |(at, cfa)| {
            if cfa <= at || cfa - at > SEARCHED || stack.read_u64(at.checked_add(FUNC)?)? != function {
                return None;
            }
            Some(Caller { return_address: stack.read_u64(at.checked_add(RA)?)?, cfa })
        })
}
