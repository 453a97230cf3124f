//! The layout, the naming and the stepping on fixture bytes: Node 20's metadata (V8 11.3), and a
//! heap and a stack made up with it.
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use framehop::x86_64::UnwindRegsX86_64;

use super::{
    ModuleId, Naming, V8Process, fixture,
    fixture::node20_symbols,
    heap::{FunctionInfo, Heap, MAX_NAME},
    image::Version,
    layout::Layout,
};
use crate::{
    frame::Frame,
    runtimes::{functions::Functions, memory::tests::Pieces},
    unwind::{RuntimeCode, RuntimeStep, StackSnapshot},
};

fn node20() -> Layout {
    fixture::node20_layout(false)
}

#[test]
fn the_layout_is_refused_when_metadata_is_missing_or_nonsense() {
    let mut symbols = node20_symbols();
    symbols.remove("off_fp_function");
    let why = Layout::new(&symbols, Version::default()).unwrap_err().to_string();
    assert_eq!(why, "it exports no v8dbg_off_fp_function");
    let mut symbols = node20_symbols();
    symbols.insert("TaggedSize".into(), 4);
    assert!(
        Layout::new(&symbols, Version::default()).unwrap_err().to_string().contains("pointer compression")
    );
    let mut symbols = node20_symbols();
    symbols.insert("class_JSFunction__shared__SharedFunctionInfo".into(), 1 << 20);
    assert!(Layout::new(&symbols, Version::default()).unwrap_err().to_string().contains("out of bounds"));
    let mut symbols = node20_symbols();
    symbols.insert("off_fp_function".into(), -8);
    assert!(Layout::new(&symbols, Version::default()).is_err(), "the function in the context's slot");
    // A later spelling of a field is taken as well.
    let mut symbols = node20_symbols();
    let offset = symbols.remove("class_SharedFunctionInfo__script_or_debug_info__HeapObject").unwrap();
    symbols.insert("class_SharedFunctionInfo__script__Tagged_HeapObject_".into(), offset);
    assert_eq!(Layout::new(&symbols, Version(11, 3, 244, 8)).unwrap(), node20());
}

/// Objects of a made-up heap: each at its address, tagged pointers to them `address + 1`.
const SFI_MAP: u64 = 0x1000;
const SCOPE_MAP: u64 = 0x1100;
const SCRIPT_MAP: u64 = 0x1200;
const ONE_BYTE_MAP: u64 = 0x1300;
const CONS_MAP: u64 = 0x1400;
const TWO_BYTE_MAP: u64 = 0x1500;
const FUNCTION: u64 = 0x2000;
const SHARED: u64 = 0x3000;
const SCOPE: u64 = 0x4000;
const SCRIPT: u64 = 0x5000;
const NAME: u64 = 0x6000;
const FILE: u64 = 0x6100;
const SOURCE: u64 = 0x7000;
const CONS: u64 = 0x8000;

fn smi(value: i64) -> u64 {
    (value as u64) << 32
}

fn words(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|word| word.to_le_bytes()).collect()
}

fn map(instance_type: u16) -> Vec<u8> {
    let mut bytes = vec![0u8; 16];
    bytes[12..14].copy_from_slice(&instance_type.to_le_bytes());
    bytes
}

fn one_byte_string(text: &str) -> Vec<u8> {
    let mut bytes = words(&[ONE_BYTE_MAP + 1, 0]);
    bytes[12..16].copy_from_slice(&(text.len() as u32).to_le_bytes());
    bytes.extend(text.as_bytes());
    bytes
}

/// `function alpha()` at position 16 (line 3) of /app/app.js, with one context local.
fn heap() -> Vec<(u64, Vec<u8>)> {
    let source = "'use strict';\n\nfunction alpha() {\n  return 1;\n}\n";
    vec![
        (SFI_MAP, map(262)),
        (SCOPE_MAP, map(261)),
        (SCRIPT_MAP, map(167)),
        (ONE_BYTE_MAP, map(8)),
        (CONS_MAP, map(1)),
        (TWO_BYTE_MAP, map(0)),
        (FUNCTION, words(&[0, 0, 0, SHARED + 1])),
        (SHARED, words(&[SFI_MAP + 1, 0, SCOPE + 1, 0, SCRIPT + 1])),
        // The map, flags, parameters, one context local (its name and info), the function's
        // name, its start (where its parameter list opens, on line 3) and end.
        (
            SCOPE,
            words(&[
                SCOPE_MAP + 1,
                smi(0),
                smi(0),
                smi(1),
                FILE + 1,
                smi(0),
                NAME + 1,
                smi(29),
                smi(48),
                0,
                0,
                0,
                0,
                0,
                0,
            ]),
        ),
        (SCRIPT, words(&[SCRIPT_MAP + 1, SOURCE + 1, FILE + 1])),
        (NAME, one_byte_string("alpha")),
        (FILE, one_byte_string("/app/app.js")),
        (SOURCE, one_byte_string(source)),
    ]
}

fn read_function(pieces: &Pieces, name_or_scope_info: u64, script: u64) -> Option<FunctionInfo> {
    let layout = node20();
    let mut read = |addr, buf: &mut [u8]| pieces.read(addr, buf);
    Heap { layout: &layout, read: &mut read }.function(name_or_scope_info, script)
}

#[test]
fn a_function_is_named_by_its_scope_info_and_script() {
    let pieces = Pieces(heap());
    let info = read_function(&pieces, SCOPE + 1, SCRIPT + 1).unwrap();
    assert_eq!(
        info,
        FunctionInfo {
            name: "alpha".into(),
            file: "/app/app.js".into(),
            line: 3,
            column: 15,
            builtin: false
        }
    );
    // Named by a string (a function not compiled yet), with no position: no line.
    let info = read_function(&pieces, NAME + 1, SCRIPT + 1).unwrap();
    assert_eq!((info.name.as_str(), info.line), ("alpha", 0));
    // No script (a builtin function): no file.
    let info = read_function(&pieces, SCOPE + 1, smi(0)).unwrap();
    assert_eq!((info.name.as_str(), info.file.as_str(), info.builtin), ("alpha", "", false));
    // No name but a script: an anonymous function of the script.
    let info = read_function(&pieces, smi(0), SCRIPT + 1).unwrap();
    assert_eq!((info.name.as_str(), info.file.as_str(), info.builtin), ("(anonymous)", "/app/app.js", false));
    // Neither: a closure of V8's builtins, left to the builtin's native frame.
    assert!(read_function(&pieces, smi(0), smi(0)).unwrap().builtin);
    // Not a scope info nor a string: nothing.
    assert_eq!(read_function(&pieces, SCRIPT + 1, SCRIPT + 1), None);
    assert_eq!(read_function(&pieces, 0x9_0001, SCRIPT + 1), None, "memory that cannot be read");
}

#[test]
fn strings_are_bounded_and_cycles_end() {
    let layout = node20();
    let cons = |first: u64, second: u64| words(&[CONS_MAP + 1, 0, first, second]);
    // A cons string of itself and a name: never ends, so it is no name.
    let mut pieces = heap();
    pieces.push((CONS, cons(CONS + 1, NAME + 1)));
    let pieces = Pieces(pieces);
    let mut read = |addr, buf: &mut [u8]| pieces.read(addr, buf);
    let mut heap_of = Heap { layout: &layout, read: &mut read };
    assert_eq!(heap_of.string(CONS + 1), None);
    // A cons string of two names reads whole.
    let mut pieces = heap();
    pieces.push((CONS, cons(NAME + 1, FILE + 1)));
    let pieces = Pieces(pieces);
    let mut read = |addr, buf: &mut [u8]| pieces.read(addr, buf);
    let mut heap_of = Heap { layout: &layout, read: &mut read };
    assert_eq!(heap_of.string(CONS + 1).as_deref(), Some("alpha/app/app.js"));
    // A long string is cut; its length word is not trusted for more than that.
    let mut pieces = heap();
    let mut long = one_byte_string(&"x".repeat(4 * MAX_NAME));
    long[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    pieces.push((CONS, long));
    let pieces = Pieces(pieces);
    let mut read = |addr, buf: &mut [u8]| pieces.read(addr, buf);
    let mut heap_of = Heap { layout: &layout, read: &mut read };
    assert_eq!(heap_of.string(CONS + 1).map(|name| name.len()), Some(MAX_NAME));
    // A two-byte string.
    let mut pieces = heap();
    let mut two = words(&[TWO_BYTE_MAP + 1, 0]);
    two[12..16].copy_from_slice(&2u32.to_le_bytes());
    two.extend("βγ".encode_utf16().flat_map(u16::to_le_bytes));
    pieces.push((CONS, two));
    let pieces = Pieces(pieces);
    let mut read = |addr, buf: &mut [u8]| pieces.read(addr, buf);
    let mut heap_of = Heap { layout: &layout, read: &mut read };
    assert_eq!(heap_of.string(CONS + 1).as_deref(), Some("βγ"));
}

/// Where the stack is, and V8's builtins and JIT code.
const SP: u64 = 0x7ff0_0000;
const BUILTINS: u64 = 0x40_0000;
const JIT: u64 = 0x7f00_0000;

fn process(pieces: Vec<(u64, Vec<u8>)>) -> V8Process {
    let pieces = Pieces(pieces);
    let memory = Box::new(move |addr, buf: &mut [u8]| pieces.read(addr, buf));
    fixture::process(node20(), BUILTINS..BUILTINS + 0x1000, 0x30_0000..0x50_0000, memory)
}

#[test]
fn frames_are_stepped_by_their_frame_pointer_and_javascript_ones_named() {
    // Innermost: JIT code whose frame (at SP + 0x20) holds a context and alpha's function, called
    // from a typed frame of the builtins (a marker: 2 × the type) at SP + 0x60, called from
    // native code at 0x30_1234.
    let (js_fp, stub_fp) = (SP + 0x20, SP + 0x60);
    let mut stack = vec![0u64; 32];
    let slot = |at: u64| ((at - SP) / 8) as usize;
    stack[slot(js_fp - 16)] = FUNCTION + 1;
    stack[slot(js_fp - 8)] = 0x7777_0001;
    stack[slot(js_fp)] = stub_fp;
    stack[slot(js_fp + 8)] = BUILTINS + 0x10;
    stack[slot(stub_fp - 8)] = 2 * 17;
    stack[slot(stub_fp)] = SP + 0xf0;
    stack[slot(stub_fp + 8)] = 0x30_1234;
    let bytes = words(&stack);
    let snapshot = StackSnapshot::new(SP, &bytes, false);
    let mut v8 = process(heap());
    let mut is_code = |addr: u64| addr == BUILTINS + 0x10 || addr == 0x30_1234;
    let regs = UnwindRegsX86_64::new(JIT + 0x55, SP, js_fp);
    let RuntimeStep::Caller(caller) = v8.step(0, &regs, &snapshot, &mut is_code) else { panic!("stepped") };
    assert_eq!((caller.ip(), caller.sp(), caller.bp()), (BUILTINS + 0x10, js_fp + 16, stub_fp));
    let RuntimeStep::Caller(native) = v8.step(1, &caller, &snapshot, &mut is_code) else { panic!("stepped") };
    assert_eq!((native.ip(), native.bp()), (0x30_1234, SP + 0xf0));
    assert_eq!(v8.step(2, &native, &snapshot, &mut is_code), RuntimeStep::NotMine, "the binary's own code");
    assert!(v8.steps_module(ModuleId::from_index(0)) && !v8.steps_module(ModuleId::from_index(1)));
    // Only the first frame is JavaScript's.
    let mut functions = Functions::default();
    let Some(Frame::Runtime { function, line }) =
        v8.stepped(0).and_then(|frame| v8.name(frame, &mut functions).frame())
    else {
        panic!("alpha's frame named")
    };
    let symbol = functions.symbol(function, line);
    assert_eq!(symbol.name, "alpha");
    assert_eq!(symbol.display_name(), "alpha (/app/app.js:3:15)");
    assert_eq!(v8.stepped(1), None, "a typed frame");
    // Named again from the cache, while its fields are the same.
    assert!(v8.name(v8.stepped(0).unwrap(), &mut functions).frame().is_some());
}

#[test]
fn frames_that_fail_their_checks_are_lost_and_other_objects_not_named() {
    let bytes = words(&[0u64; 8]);
    let snapshot = StackSnapshot::new(SP, &bytes, false);
    let mut v8 = process(heap());
    let mut is_code = |_: u64| false;
    // A frame pointer below the stack pointer, and a return address that is not code.
    let below = UnwindRegsX86_64::new(JIT, SP, SP - 16);
    assert_eq!(v8.step(0, &below, &snapshot, &mut is_code), RuntimeStep::Lost);
    let regs = UnwindRegsX86_64::new(JIT, SP, SP + 16);
    assert_eq!(v8.step(0, &regs, &snapshot, &mut is_code), RuntimeStep::Lost);
    assert_eq!(v8.lost, 2);
    // A "function" whose shared info is not one (its map says a script): not named.
    let mut pieces = heap();
    pieces.push((0x9000, words(&[0, 0, 0, SCRIPT + 1])));
    let mut v8 = process(pieces);
    let mut functions = Functions::default();
    assert_eq!(v8.name(super::stack::JsFrame { function: 0x9001 }, &mut functions), Naming::Unread);
}

/// A process whose memory is `before` until the flag returned is set, then `after` (`None`:
/// nothing readable, the process gone).
fn process_changing(
    before: Vec<(u64, Vec<u8>)>,
    after: Option<Vec<(u64, Vec<u8>)>>,
) -> (V8Process, Arc<AtomicBool>) {
    let changed = Arc::new(AtomicBool::new(false));
    let (before, after) = (Pieces(before), after.map(Pieces));
    let memory = Box::new({
        let changed = changed.clone();
        move |addr, buf: &mut [u8]| match (changed.load(Ordering::Relaxed), &after) {
            (false, _) => before.read(addr, buf),
            (true, Some(after)) => after.read(addr, buf),
            (true, None) => false,
        }
    });
    (fixture::process(node20(), BUILTINS..BUILTINS + 0x1000, 0x30_0000..0x50_0000, memory), changed)
}

/// Names alpha's frame, sets `changed`, and checks that it is named the same again.
fn alpha_named_as_before(v8: &mut V8Process, changed: &AtomicBool, functions: &mut Functions) {
    let alpha = super::stack::JsFrame { function: FUNCTION + 1 };
    let named = v8.name(alpha, functions);
    assert!(named.frame().is_some());
    changed.store(true, Ordering::Relaxed);
    assert_eq!(v8.name(alpha, functions), named);
}

/// The last samples of a process that exits are named once it is gone: a function read before is
/// named as it was, one never read is not.
#[test]
fn frames_of_a_process_gone_are_named_as_last_read() {
    let (mut v8, gone) = process_changing(heap(), None);
    let mut functions = Functions::default();
    alpha_named_as_before(&mut v8, &gone, &mut functions);
    assert_eq!(v8.name(super::stack::JsFrame { function: 0x9001 }, &mut functions), Naming::Unread);
}

/// A function the garbage collector moved between the sample and the read, something else now
/// where it was (an object that is no function, or words pointing at nothing mapped): named as
/// last read at that address, the way a process gone is.
#[test]
fn a_function_moved_since_the_sample_is_named_as_last_read() {
    for there_now in [words(&[0, 0, 0, SCRIPT + 1]), words(&[0, 0, 0, 0x9990_0001])] {
        let mut after = heap();
        after.retain(|(at, _)| *at != FUNCTION);
        after.push((FUNCTION, there_now));
        let (mut v8, moved) = process_changing(heap(), Some(after));
        alpha_named_as_before(&mut v8, &moved, &mut Functions::default());
    }
}

/// The frame of a closure of V8's builtins (no script, no name: what an `await` resumes by) is
/// not named `(anonymous)`: its native frame, the builtin's, stays; from the cache too, and once
/// the process is gone.
#[test]
fn closures_of_v8s_builtins_leave_their_native_frame() {
    const RESOLVE: u64 = 0x2100;
    const RESOLVE_SHARED: u64 = 0x3100;
    let mut pieces = heap();
    pieces.push((RESOLVE, words(&[0, 0, 0, RESOLVE_SHARED + 1])));
    pieces.push((RESOLVE_SHARED, words(&[SFI_MAP + 1, 0, smi(0), 0, smi(0)])));
    let (mut v8, gone) = process_changing(pieces, None);
    let mut functions = Functions::default();
    let resolve = super::stack::JsFrame { function: RESOLVE + 1 };
    assert_eq!(v8.name(resolve, &mut functions), Naming::Builtin);
    assert_eq!(v8.name(resolve, &mut functions), Naming::Builtin, "from the cache");
    gone.store(true, Ordering::Relaxed);
    assert_eq!(v8.name(resolve, &mut functions), Naming::Builtin, "as last read");
}

#[test]
fn a_binary_without_v8_is_not_one_and_garbage_is_not_elf() {
    let own = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert!(super::image::Image::read(&own).unwrap().is_none(), "no v8dbg_* symbols, no builtins");
    assert!(super::image::Image::read(b"#!/bin/sh\nexec node \"$@\"\n").unwrap().is_none());
}
