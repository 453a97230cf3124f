//! A JVM over any memory, for tests and fuzz targets: JDK 25's layout, a code heap, blob kinds
//! given by name address, and a walk of a stack through it that names every frame it steps.
use framehop::x86_64::UnwindRegsX86_64;

use super::{
    Allowance, BlobKind, Frame, Functions, JavaStats, Jvm, Memory, Started,
    code_cache::Heap,
    layout::{BlobLayout, Deopt, Int, Layout, Overloads},
    vm_structs::TableCounts,
};
use crate::unwind::{RuntimeCode, RuntimeStep, StackSnapshot};

/// A JVM whose code cache is `heap`, blob names at the addresses of `kinds` telling their kind.
pub fn jvm(layout: Layout, heap: Heap, kinds: &[(u64, BlobKind)], memory: Memory) -> Jvm {
    let started = Started { code_cache: heap.code.clone(), heaps: vec![heap], call_stub_return: 0x1 };
    let mut jvm = Jvm::new(TableCounts::default(), layout, started, None, memory, Allowance::unbounded(None));
    jvm.kinds.extend(kinds.iter().copied());
    jvm
}

/// Steps `jvm`'s frames from the leaf (`pc`, `sp`, `fp`, `r13`) on `stack`, at most `depth` of them, as the unwinder would
/// (stopping at the first frame not in the code cache, or lost); then names those it stepped.
pub fn walk(
    jvm: &mut Jvm,
    [pc, sp, fp, r13]: [u64; 4],
    stack: &StackSnapshot<'_>,
    is_code: &mut dyn FnMut(u64) -> bool,
    depth: usize,
) -> Walked {
    jvm.begin_stack(0, r13);
    let mut regs = UnwindRegsX86_64::new(pc, sp, fp);
    let mut steps = Vec::new();
    for depth in 0..depth {
        let step = jvm.step(depth, &regs, stack, is_code);
        steps.push(step);
        match step {
            RuntimeStep::Caller(caller) if caller.sp() > regs.sp() => regs = caller,
            _ => break,
        }
    }
    let (mut functions, mut stats, mut frames) = (Functions::default(), JavaStats::default(), Vec::new());
    for (_, physical) in jvm.stepped.clone() {
        jvm.java_frames(physical, &mut functions, &mut frames, &mut stats);
    }
    Walked { steps, frames, functions, stats }
}

/// What [`walk`] did: its steps, and the frames it named with their functions.
pub struct Walked {
    pub steps: Vec<RuntimeStep>,
    pub frames: Vec<Frame>,
    pub functions: Functions,
    pub stats: JavaStats,
}

fn int(offset: usize, width: usize) -> Int {
    Int { offset, width, signed: false }
}

/// JDK 25's offsets (docs/hotspot-layouts.md §2.1).
pub fn jdk25_layout() -> Layout {
    Layout {
        heaps: 0,
        low_bound: 0,
        high_bound: 0,
        call_stub_return_address: 0,
        array_len: int(0, 4),
        array_data: int(8, 8),
        heap_memory: 0,
        heap_segmap: 112,
        heap_log2_segment_size: int(248, 4),
        space_low: int(16, 8),
        space_high: int(24, 8),
        block_used: int(4, 1),
        block_size: 8,
        blob_name: int(8, 8),
        blob_size: int(24, 4),
        blob_frame_complete: Int { offset: 54, width: 2, signed: true },
        blob_frame_size: Int { offset: 44, width: 4, signed: true },
        blob: BlobLayout::Relative {
            code_offset: int(36, 4),
            data_offset: int(40, 4),
            immutable_data: int(96, 8),
            immutable_data_size: int(160, 4),
            scopes_data_offset: int(200, 4),
            mutable_data: int(16, 8),
            mutable_data_size: int(48, 4),
            relocation_size: int(28, 4),
        },
        nmethod_header: 224,
        nmethod_method: int(80, 8),
        nmethod_compile_id: int(212, 4),
        nmethod_scopes_pcs_offset: int(196, 4),
        deopt: Some(Deopt {
            handlers: [int(176, 4), int(180, 4)],
            from_blob: true,
            orig_pc_offset: int(208, 4),
        }),
        method_const_method: int(8, 8),
        const_method_constants: int(8, 8),
        const_method_flags: int(28, 4),
        const_method_code_size: int(34, 2),
        const_method_name_index: int(36, 2),
        const_method_size: 56,
        has_line_table: 1,
        pool_holder: int(24, 8),
        pool_source_file_index: int(54, 2),
        pool_length: int(60, 4),
        pool_size: 72,
        klass_name: int(24, 8),
        overloads: Some(Overloads {
            klass_methods: int(400, 8),
            array_length: int(0, 4),
            array_data: 8,
            signature_index: int(38, 2),
        }),
        symbol_length: int(4, 2),
        symbol_body: 6,
        unsigned5_base: 1,
    }
}

/// JDK 17's offsets (docs/hotspot-layouts.md §2.1): absolute code pointers, debug information in
/// the blob.
pub fn jdk17_layout() -> Layout {
    Layout {
        heap_memory: 8,
        heap_segmap: 120,
        heap_log2_segment_size: int(256, 4),
        block_used: int(8, 1),
        block_size: 16,
        blob_name: int(96, 8),
        blob_size: int(12, 4),
        blob_frame_complete: Int { offset: 20, width: 4, signed: true },
        blob_frame_size: Int { offset: 28, width: 4, signed: true },
        blob: BlobLayout::Absolute {
            code_begin: int(32, 8),
            code_end: int(40, 8),
            scopes_data_begin: int(120, 8),
            metadata_offset: int(260, 4),
            dependencies_offset: int(272, 4),
        },
        nmethod_header: 308,
        nmethod_method: int(112, 8),
        nmethod_compile_id: int(304, 4),
        nmethod_scopes_pcs_offset: int(268, 4),
        deopt: Some(Deopt {
            handlers: [int(128, 8), int(136, 8)],
            from_blob: false,
            orig_pc_offset: int(300, 4),
        }),
        const_method_flags: int(28, 2),
        const_method_code_size: int(32, 2),
        const_method_name_index: int(34, 2),
        const_method_size: 48,
        overloads: Some(Overloads {
            klass_methods: int(408, 8),
            array_length: int(0, 4),
            array_data: 8,
            signature_index: int(36, 2),
        }),
        unsigned5_base: 0,
        ..jdk25_layout()
    }
}
