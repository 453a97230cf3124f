//! V8 over any memory, for tests and fuzz targets: Node 20's layout (V8 11.3), and a walk of a
//! stack through it that names every JavaScript frame it steps.
use std::{collections::HashMap, ops::Range, sync::Arc};

use framehop::x86_64::UnwindRegsX86_64;

use super::{Allowance, Memory, V8Process, image::Version, layout::Layout};
use crate::{
    address_space::ModuleId,
    frame::Frame,
    runtimes::{functions::Functions, ranges::Ranges},
    unwind::{RuntimeCode, RuntimeStep, StackSnapshot},
};

/// The `v8dbg_*` values of Node 20.20 the walk reads (from its binary).
pub fn node20_symbols() -> HashMap<String, i64> {
    [
        ("TaggedSize", 8),
        ("HeapObjectTag", 1),
        ("SmiTagMask", 1),
        ("off_fp_context_or_frame_type", -8),
        ("off_fp_function", -16),
        ("class_HeapObject__map__Map", 0),
        ("class_Map__instance_type__uint16_t", 12),
        ("class_JSFunction__shared__SharedFunctionInfo", 24),
        ("class_SharedFunctionInfo__name_or_scope_info__Object", 16),
        ("class_SharedFunctionInfo__script_or_debug_info__HeapObject", 32),
        ("class_Script__name__Object", 16),
        ("class_Script__source__Object", 8),
        ("class_String__length__int32_t", 12),
        ("class_SeqOneByteString__chars__char", 16),
        ("class_SeqTwoByteString__chars__char", 16),
        ("class_ConsString__first__String", 16),
        ("class_ConsString__second__String", 24),
        ("class_ThinString__actual__String", 16),
        ("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE", 262),
        ("type_Script__SCRIPT_TYPE", 167),
        ("type_ScopeInfo__SCOPE_INFO_TYPE", 261),
        ("FirstNonstringType", 128),
        ("StringRepresentationMask", 7),
        ("SeqStringTag", 0),
        ("ConsStringTag", 1),
        ("ThinStringTag", 5),
        ("StringEncodingMask", 8),
        ("OneByteStringTag", 8),
        ("scopeinfo_idx_ncontextlocals", 2),
        ("scopeinfo_idx_first_vars", 3),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// Node 20's layout; with the fixed position slots of V8 12.8.44 and later if `fixed`.
pub fn node20_layout(fixed: bool) -> Layout {
    let version = if fixed { Version(13, 6, 233, 0) } else { Version(11, 3, 244, 8) };
    Layout::new(&node20_symbols(), version).expect("Node 20's metadata makes a layout")
}

/// V8 in a process of its binary's `module`, with its builtins at `builtins` and the binary's
/// code at `text`, reading `memory`.
pub fn process(layout: Layout, builtins: Range<u64>, text: Range<u64>, memory: Memory) -> V8Process {
    V8Process::new(
        Arc::new(layout),
        ModuleId::from_index(0),
        Ranges::new([builtins], 1),
        Ranges::new([text], 1),
        memory,
        Allowance::unbounded(None),
    )
}

/// Steps `v8`'s frames from the leaf (`pc`, `sp`, `fp`) on `stack`, at most `depth` of them, as
/// the unwinder would (stopping at the first frame not V8's, or lost); then names those it
/// stepped.
pub fn walk(
    v8: &mut V8Process,
    [pc, sp, fp]: [u64; 3],
    stack: &StackSnapshot<'_>,
    is_code: &mut dyn FnMut(u64) -> bool,
    depth: usize,
) -> Walked {
    v8.stepped.clear();
    let mut regs = UnwindRegsX86_64::new(pc, sp, fp);
    let mut steps = Vec::new();
    for depth in 0..depth {
        let step = v8.step(depth, &regs, stack, is_code);
        steps.push(step);
        match step {
            RuntimeStep::Caller(caller) if caller.sp() > regs.sp() => regs = caller,
            _ => break,
        }
    }
    let mut functions = Functions::default();
    let stepped = v8.stepped.clone();
    let frames =
        stepped.into_iter().filter_map(|(_, frame)| v8.name(frame, &mut functions).frame()).collect();
    Walked { steps, frames, functions }
}

/// What [`walk`] did: its steps, and the frames it named with their functions.
pub struct Walked {
    pub steps: Vec<RuntimeStep>,
    pub frames: Vec<Frame>,
    pub functions: Functions,
}
