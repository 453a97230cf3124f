//! The walk and the naming on a JVM made of fixture bytes: JDK 25's layout, a code heap with an
//! nmethod (an inlined method in it) and the interpreter, their metadata, and a stack of a
//! compiled frame called by an interpreted one called from native code.
use framehop::x86_64::UnwindRegsX86_64;

use super::{
    fixture::{self, jdk25_layout},
    *,
};
use crate::{
    model::SymbolKind,
    runtimes::memory::tests::Pieces,
    unwind::{RuntimeStep, StackSnapshot},
};

const CODE: u64 = 0x10_0000;
const SEGMAP: u64 = 0x20_0000;
const NMETHOD: u64 = CODE + 8;
const INTERPRETER: u64 = CODE + 0x1000 + 8;
const NMETHOD_NAME: u64 = 0x7000_0000;
const INTERPRETER_NAME: u64 = 0x7000_0100;
const IMMUTABLE: u64 = 0x28_0000;
const MUTABLE: u64 = 0x29_0000;
const METHOD_A: u64 = 0x30_0000;
const METHOD_B: u64 = 0x30_1000;
/// Another method named as A, with another signature (an overload).
const METHOD_A2: u64 = 0x30_2000;
const METHODS: u64 = 0x33_1000;
const POOL: u64 = 0x32_0000;
const KLASS: u64 = 0x33_0000;
const SYMBOLS: u64 = 0x34_0000;
const STACK: u64 = 0x7ff0_0000;
const NATIVE: std::ops::Range<u64> = 0x40_0000..0x41_0000;
/// The sampled pc, in the nmethod's code; the interpreter's call into it returns here.
const LEAF_PC: u64 = NMETHOD + 0x100 + 0x50;
const INTERPRETER_RETURN: u64 = INTERPRETER + 0x80 + 0x40;
const NATIVE_RETURN: u64 = 0x40_1000;
const FP: u64 = STACK + 0x100;

fn put(bytes: &mut [u8], at: usize, value: u64, width: usize) {
    bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
}

/// A blob's block: its `HeapBlock` header (length, used), then the blob's header.
fn block(fields: &[(usize, u64, usize)]) -> Vec<u8> {
    let mut bytes = vec![0u8; 8 + 224];
    put(&mut bytes, 4, 1, 1);
    for &(at, value, width) in fields {
        put(&mut bytes, 8 + at, value, width);
    }
    bytes
}

fn symbol(text: &str) -> Vec<u8> {
    let mut bytes = vec![0u8; 6];
    put(&mut bytes, 4, text.len() as u64, 2);
    bytes.extend(text.as_bytes());
    bytes
}

/// A method named by constant pool slot `name_index`: its `Method`, and its `ConstMethod` with
/// 10 bytes of bytecodes and a line table (bci 0: line 5, bci 2: line 6).
fn method(at: u64, name_index: u64, signature_index: u64) -> [(u64, Vec<u8>); 2] {
    let const_method = at + 0x10_000;
    let mut method = vec![0u8; 88];
    put(&mut method, 8, const_method, 8);
    let mut constant = vec![0u8; 56 + 10];
    put(&mut constant, 8, POOL, 8);
    put(&mut constant, 28, 1, 4);
    put(&mut constant, 34, 10, 2);
    put(&mut constant, 36, name_index, 2);
    put(&mut constant, 38, signature_index, 2);
    constant.extend([5, (2 << 3) | 1, 0]);
    constant.resize(constant.len() + 512, 0);
    [(at, method), (const_method, constant)]
}

/// Writes `values` as UNSIGNED5 numbers in base 1 (all below 191: one byte each).
fn unsigned5(values: &[u64]) -> Vec<u8> {
    values.iter().map(|&v| v as u8 + 1).collect()
}

fn memory() -> Pieces {
    let mut segmap = vec![0xffu8; 0x200];
    for (i, byte) in segmap[0..8].iter_mut().enumerate() {
        *byte = i as u8;
    }
    for (i, byte) in segmap[32..48].iter_mut().enumerate() {
        *byte = i as u8;
    }
    let nmethod = block(&[
        (8, NMETHOD_NAME, 8),
        (24, 0x3f0, 4),
        (36, 0x100, 4),
        (40, 0x300, 4),
        (44, 4, 4),
        (54, 0x10, 2),
        (96, IMMUTABLE, 8),
        (160, 0x100, 4),
        (196, 0, 4),
        (200, 32, 4),
        (16, MUTABLE, 8),
        (28, 0, 4),
        (48, 16, 4),
        (80, METHOD_A, 8),
        (212, 7, 4),
    ]);
    let interpreter = block(&[(8, INTERPRETER_NAME, 8), (24, 0x7f8, 4), (36, 0x80, 4), (40, 0x7f8, 4)]);
    // PcDescs (sentinel, then pc 0x60 with the inlined scope at 4), then the scopes: at 1 the
    // compiled method A at bci 2, at 4 method B inlined into it at bci 0.
    let mut immutable = Vec::new();
    for (pc, scope) in [(-1i32, 0i32), (0x60, 4)] {
        immutable.extend(pc.to_le_bytes());
        immutable.extend(scope.to_le_bytes());
        immutable.extend([0; 8]);
    }
    let scopes = [vec![0], unsigned5(&[0, 1, 3]), unsigned5(&[1, 2, 1])].concat();
    immutable.extend(&scopes);
    immutable.resize(0x100, 0);
    let metadata = [METHOD_A, METHOD_B].iter().flat_map(|m| m.to_le_bytes()).collect();
    let mut pool = vec![0u8; 72 + 8 * 6];
    put(&mut pool, 24, KLASS, 8);
    put(&mut pool, 54, 3, 2);
    put(&mut pool, 60, 6, 4);
    let slots = [
        (1, SYMBOLS),
        (2, SYMBOLS + 0x100),
        (3, SYMBOLS + 0x200),
        (4, SYMBOLS + 0x400),
        (5, SYMBOLS + 0x500),
    ];
    for (slot, at) in slots {
        put(&mut pool, 72 + 8 * slot, at, 8);
    }
    let mut klass = vec![0u8; 408];
    put(&mut klass, 24, SYMBOLS + 0x300, 8);
    // Its methods: A, B and A's overload.
    put(&mut klass, 400, METHODS, 8);
    let mut methods = vec![0u8; 8 + 8 * 3];
    put(&mut methods, 0, 3, 4);
    for (i, method) in [METHOD_A, METHOD_B, METHOD_A2].into_iter().enumerate() {
        put(&mut methods, 8 + 8 * i, method, 8);
    }
    let mut stack = vec![0u8; 0x200];
    put(&mut stack, 24, INTERPRETER_RETURN, 8);
    put(&mut stack, 16, FP, 8);
    let fp = (FP - STACK) as usize;
    put(&mut stack, fp - 24, METHOD_A, 8);
    put(&mut stack, fp - 64, METHOD_A + 0x10_000 + 56 + 2, 8);
    put(&mut stack, fp - 8, FP + 16, 8);
    put(&mut stack, fp + 8, NATIVE_RETURN, 8);
    let mut pieces = vec![
        (SEGMAP, segmap),
        (CODE, nmethod),
        (CODE + 0x1000, interpreter),
        (IMMUTABLE, immutable),
        (MUTABLE, metadata),
        (POOL, pool),
        (KLASS, klass),
        (METHODS, methods),
        (SYMBOLS, symbol("A")),
        (SYMBOLS + 0x100, symbol("b")),
        (SYMBOLS + 0x200, symbol("Outer.java")),
        (SYMBOLS + 0x300, symbol("pkg/Outer")),
        (SYMBOLS + 0x400, symbol("(J)J")),
        (SYMBOLS + 0x500, symbol("(I)I")),
        (STACK, stack),
    ];
    pieces.extend(method(METHOD_A, 1, 4));
    pieces.extend(method(METHOD_B, 2, 4));
    pieces.extend(method(METHOD_A2, 1, 5));
    Pieces(pieces)
}

fn jvm(memory: Pieces) -> Jvm {
    let heap = code_cache::Heap { code: CODE..CODE + 0x10000, segmap: SEGMAP, log2_segment: 7 };
    let kinds = [(NMETHOD_NAME, BlobKind::Nmethod), (INTERPRETER_NAME, BlobKind::Interpreter)];
    fixture::jvm(jdk25_layout(), heap, &kinds, Box::new(move |addr, buf| memory.read(addr, buf)))
}

/// Steps the fixture's stack from the leaf until native code, and names its frames.
fn walk(jvm: &mut Jvm, stack: &[u8]) -> fixture::Walked {
    let snapshot = StackSnapshot::new(STACK, stack, false);
    let leaf = [LEAF_PC, STACK, 0xdead, 0];
    let code = CODE..CODE + 0x10000;
    fixture::walk(jvm, leaf, &snapshot, &mut |addr| NATIVE.contains(&addr) || code.contains(&addr), 4)
}

fn stack_bytes(memory: &Pieces) -> Vec<u8> {
    memory.0.iter().find(|(at, _)| *at == STACK).unwrap().1.clone()
}

#[test]
fn compiled_and_interpreted_frames_step_to_their_native_caller() {
    let memory = memory();
    let stack = stack_bytes(&memory);
    let mut jvm = jvm(memory);
    assert_eq!(
        walk(&mut jvm, &stack).steps,
        [
            RuntimeStep::Caller(UnwindRegsX86_64::new(INTERPRETER_RETURN, STACK + 32, FP)),
            RuntimeStep::Caller(UnwindRegsX86_64::new(NATIVE_RETURN, FP + 16, 0)),
            RuntimeStep::NotMine,
        ]
    );
    assert_eq!(
        jvm.stepped,
        [
            (0, Physical::Compiled { blob: NMETHOD, compile_id: 7, pc: LEAF_PC, exact: false }),
            (
                1,
                Physical::Interpreted {
                    method: METHOD_A,
                    bcp: METHOD_A + 0x10_000 + 56 + 2,
                    saved_bcp: METHOD_A + 0x10_000 + 56 + 2
                }
            ),
        ]
    );
}

#[test]
fn compiled_frames_name_their_inlined_methods_interpreted_ones_their_method() {
    let memory = memory();
    let stack = stack_bytes(&memory);
    let fixture::Walked { frames, functions, stats, .. } = walk(&mut jvm(memory), &stack);
    let named: Vec<(String, SymbolKind, u32)> = frames
        .iter()
        .map(|frame| {
            let Frame::Runtime { function, line } = *frame else { panic!("{frame:?}") };
            let symbol = functions.symbol(function, line);
            assert_eq!(symbol.source.as_ref().map(|s| s.file.as_str()), Some("Outer.java"));
            (symbol.name, symbol.kind, line)
        })
        .collect();
    assert_eq!(
        named,
        [
            ("pkg.Outer.b".to_owned(), SymbolKind::Inlined, 5),
            // Overloaded: told apart by its signature.
            ("pkg.Outer.A(J)J".to_owned(), SymbolKind::Jit, 6),
            ("pkg.Outer.A(J)J".to_owned(), SymbolKind::Function, 6),
        ]
    );
    assert_eq!((stats.frames, stats.unreadable), (3, 0));
}

#[test]
fn a_frame_being_deoptimized_is_named_at_its_original_pc() {
    // Its callee returns to the nmethod's deoptimization handler; the original return address
    // (at the PcDesc of pc offset 0x60) is kept at the frame's sp + `_orig_pc_offset`.
    let mut memory = memory();
    let handler = NMETHOD + 0x2f0;
    put(&mut memory.0[1].1, 8 + 176, handler - NMETHOD, 4);
    put(&mut memory.0[1].1, 8 + 208, 8, 4);
    let stack_at = memory.0.iter().position(|(at, _)| *at == STACK).unwrap();
    put(&mut memory.0[stack_at].1, 8, NMETHOD + 0x100 + 0x60, 8);
    let stack = stack_bytes(&memory);
    let code = CODE..CODE + 0x10000;
    let walked = fixture::walk(
        &mut jvm(memory),
        [handler, STACK, 0, 0],
        &StackSnapshot::new(STACK, &stack, false),
        &mut |addr| NATIVE.contains(&addr) || code.contains(&addr),
        1,
    );
    assert_eq!(
        walked.steps,
        [RuntimeStep::Caller(UnwindRegsX86_64::new(INTERPRETER_RETURN, STACK + 32, FP))]
    );
    let names: Vec<String> = walked
        .frames
        .iter()
        .map(|frame| match *frame {
            Frame::Runtime { function, line } => walked.functions.symbol(function, line).name,
            _ => panic!("{frame:?}"),
        })
        .collect();
    assert_eq!(
        names,
        ["pkg.Outer.b", "pkg.Outer.A(J)J"],
        "the scopes of the original pc, not the method alone"
    );
}

#[test]
fn an_innermost_interpreted_frame_is_at_its_live_bytecode_pointer() {
    // The frame's bcp slot still at bci 0 (line 5), r13 at bci 2 (line 6).
    let mut memory = memory();
    let stack_at = memory.0.iter().position(|(at, _)| *at == STACK).unwrap();
    let bytecodes = METHOD_A + 0x10_000 + 56;
    put(&mut memory.0[stack_at].1, (FP - STACK - 64) as usize, bytecodes, 8);
    let stack = stack_bytes(&memory);
    let code = CODE..CODE + 0x10000;
    let mut jvm = jvm(memory);
    let mut line = |r13| {
        let walked = fixture::walk(
            &mut jvm,
            [INTERPRETER_RETURN, STACK + 32, FP, r13],
            &StackSnapshot::new(STACK, &stack, false),
            &mut |addr| NATIVE.contains(&addr) || code.contains(&addr),
            1,
        );
        match walked.frames[..] {
            [Frame::Runtime { line, .. }] => line,
            _ => panic!("{:?}", walked.frames),
        }
    };
    assert_eq!(line(bytecodes + 2), 6);
    assert_eq!(line(0x1234), 5, "r13 not in the method's bytecodes: the slot's");
}

#[test]
fn code_freed_or_garbage_is_never_named_nor_stepped() {
    // The nmethod's block freed since: the walk stops at it.
    let mut memory = memory();
    let stack = stack_bytes(&memory);
    memory.0[1].1[4] = 0;
    assert_eq!(walk(&mut jvm(memory), &stack).steps, [RuntimeStep::Lost]);
    // Its segment map marking the pc's segment free, or hopping out of the heap.
    for byte in [0xff, 0x40] {
        let mut memory = self::memory();
        memory.0[0].1[2] = byte;
        assert_eq!(walk(&mut jvm(memory), &stack).steps, [RuntimeStep::Lost], "segment map byte {byte:#x}");
    }
    // A frame size of 2^31 words, or one that puts the return address outside any code.
    for (words, end) in [(i32::MAX as u64, RuntimeStep::Lost), (6, RuntimeStep::Lost)] {
        let mut memory = self::memory();
        put(&mut memory.0[1].1, 8 + 44, words, 4);
        assert_eq!(walk(&mut jvm(memory), &stack).steps[0], end, "frame size {words}");
    }
    // Recompiled since the sample: another compile id, so the frame is not named.
    let memory = self::memory();
    let mut jvm = jvm(memory);
    walk(&mut jvm, &stack);
    let (mut functions, mut stats) = (Functions::default(), JavaStats::default());
    let stale = Physical::Compiled { blob: NMETHOD, compile_id: 8, pc: LEAF_PC, exact: false };
    let mut frames = Vec::new();
    jvm.java_frames(stale, &mut functions, &mut frames, &mut stats);
    assert!(frames.is_empty());
    assert_eq!(stats.unreadable, 1);
}
