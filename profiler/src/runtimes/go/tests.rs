use framehop::x86_64::UnwindRegsX86_64;

use std::sync::Arc;

use super::{
    Binary, Go, GoProcess,
    fixture::{FixtureFunction, TEXT, table},
    table::{GoTable, Located, Placement, Version, Work},
};
use crate::{
    address_space::ModuleId,
    frame::Frame,
    runtimes::{Runtime as _, functions::Functions},
    untrusted::{Cache, DESCRIBED},
};

/// Runs of value tables a test's lookups may decode.
const RUNS: usize = 1 << 20;

/// Each layout, and a release that writes it.
const VERSIONS: [(Version, &str); 4] = [
    (Version::Go12, "go1.15.15"),
    (Version::Go116, "go1.16.15"),
    (Version::Go118, "go1.19.8"),
    (Version::Go120, "go1.26.10"),
];

fn function(name: &str, size: u64, sp: &[(u64, i32)], lines: &[(u64, i32)], file: i32) -> FixtureFunction {
    FixtureFunction {
        name: name.into(),
        size,
        sp: sp.to_vec(),
        lines: lines.to_vec(),
        file,
        ..Default::default()
    }
}

/// `runtime.goexit`, then `main.work` (a frame of 0x28 bytes after a 4-byte prologue, lines 10
/// to 12), then `main.leaf` (no frame, in another file).
fn functions() -> Vec<FixtureFunction> {
    vec![
        function("runtime.goexit", 0x10, &[(0x10, 0)], &[(0x10, 400)], 0),
        function(
            "main.work",
            0x40,
            &[(0x4, 0), (0x3c, 0x28), (0x40, 0)],
            &[(0x8, 10), (0x30, 11), (0x40, 12)],
            1,
        ),
        function("main.leaf", 0x20, &[(0x20, 0)], &[(0x20, 7)], 2),
    ]
}

const FILES: [&str; 3] = ["/usr/lib/go/src/runtime/asm_amd64.s", "/app/main.go", "/app/leaf.go"];

fn go_table((version, release): (Version, &str)) -> GoTable<Vec<u8>> {
    let (bytes, placement) = table(version, release, true, &functions(), &FILES);
    GoTable::new(bytes, placement).unwrap()
}

#[test]
fn functions_are_found_with_their_names_offsets_and_lines_in_every_layout() {
    for (version, release) in VERSIONS {
        let table = go_table((version, release));
        assert_eq!(table.version(), version);
        assert_eq!(table.placement().release.as_deref(), Some(release));
        assert_eq!(table.functions(), 3);
        assert_eq!(table.text(), Some(TEXT..TEXT + 0x70), "{version:?}");
        assert_eq!(table.function(TEXT - 1), None, "before the text");
        assert_eq!(table.function(TEXT + 0x70), None, "past the last function");
        let main_work = table.function(TEXT + 0x10).unwrap();
        assert_eq!(main_work.entry, TEXT + 0x10);
        assert_eq!(table.function(TEXT + 0x4f), Some(main_work));
        assert_eq!(table.name(main_work, &mut Work::new(RUNS)), Some(&b"main.work"[..]));
        // Each run ends where the next starts.
        assert_eq!(table.sp_offset(main_work, TEXT + 0x10, &mut Work::new(RUNS)), Some(0));
        assert_eq!(table.sp_offset(main_work, TEXT + 0x14, &mut Work::new(RUNS)), Some(0x28));
        assert_eq!(table.sp_offset(main_work, TEXT + 0x4b, &mut Work::new(RUNS)), Some(0x28));
        assert_eq!(table.sp_offset(main_work, TEXT + 0x4c, &mut Work::new(RUNS)), Some(0));
        assert_eq!(
            table.source(main_work, TEXT + 0x17, &mut Work::new(RUNS)),
            Some((&b"/app/main.go"[..], 10))
        );
        assert_eq!(
            table.source(main_work, TEXT + 0x18, &mut Work::new(RUNS)),
            Some((&b"/app/main.go"[..], 11))
        );
        assert_eq!(
            table.source(main_work, TEXT + 0x4f, &mut Work::new(RUNS)),
            Some((&b"/app/main.go"[..], 12))
        );
        let leaf = table.function(TEXT + 0x6f).unwrap();
        assert_eq!(table.name(leaf, &mut Work::new(RUNS)), Some(&b"main.leaf"[..]));
        assert_eq!(table.source(leaf, TEXT + 0x50, &mut Work::new(RUNS)), Some((&b"/app/leaf.go"[..], 7)));
        assert!(!table.writes_sp(leaf));
    }
}

#[test]
fn where_the_text_starts_comes_from_the_module_data_when_the_header_leaves_it_out() {
    for release in ["go1.19.8", "go1.26.10"] {
        let version = if release == "go1.19.8" { Version::Go118 } else { Version::Go120 };
        let (bytes, placement) = table(version, release, false, &functions(), &FILES);
        let table = GoTable::new(bytes.clone(), placement.clone()).unwrap();
        assert_eq!(table.text(), Some(TEXT..TEXT + 0x70));
        let without = Placement { module_data: None, ..placement.clone() };
        let refused = GoTable::new(bytes.clone(), without).err().unwrap();
        assert!(refused.to_string().contains("module data was not found"), "{refused}");
        // Module data that does not say where the table's names are is another's.
        let mut data = placement.module_data.clone().unwrap();
        data[1] += 8;
        let another = Placement { module_data: Some(data), ..placement };
        assert!(GoTable::new(bytes, another).is_err());
    }
}

/// Functions that move the stack pointer to another stack say so from Go 1.17; before, their
/// names do.
#[test]
fn functions_that_switch_stacks_are_known_in_every_release() {
    let mut functions = functions();
    functions.push(FixtureFunction {
        name: "runtime.systemstack".into(),
        size: 0x10,
        flag: 1 << 1,
        ..Default::default()
    });
    for (version, release) in VERSIONS.into_iter().chain([(Version::Go116, "go1.17.13")]) {
        let (bytes, placement) = table(version, release, true, &functions, &FILES);
        let table = GoTable::new(bytes, placement).unwrap();
        let systemstack = table.function(TEXT + 0x70).unwrap();
        assert!(table.writes_sp(systemstack), "{release}");
        assert!(!table.writes_sp(table.function(TEXT + 0x10).unwrap()), "{release}");
    }
}

/// `main.work` with `main.twice` inlined into it at 0x20-0x30 (called at 0x18) and
/// `main.square` into `main.twice` at 0x28-0x30 (called at 0x24).
fn inlining() -> Vec<FixtureFunction> {
    vec![FixtureFunction {
        name: "main.work".into(),
        size: 0x40,
        sp: vec![(0x40, 8)],
        lines: vec![(0x18, 10), (0x20, 11), (0x24, 20), (0x28, 21), (0x30, 30), (0x40, 12)],
        file: 0,
        inlined: vec![("main.twice".into(), 0x18), ("main.square".into(), 0x24)],
        inlined_at: vec![(0x20, -1), (0x28, 0), (0x30, 1), (0x40, -1)],
        ..Default::default()
    }]
}

#[test]
fn calls_inlined_at_a_pc_are_frames_of_their_own_innermost_first() {
    let releases =
        [(Version::Go12, "go1.14.15"), (Version::Go118, "go1.19.8"), (Version::Go120, "go1.26.10")];
    for (version, release) in releases {
        let (bytes, placement) = table(version, release, true, &inlining(), &["/app/main.go"]);
        let table = GoTable::new(bytes.clone(), placement.clone()).unwrap();
        assert!(table.reads_inlined());
        let main_work = table.function(TEXT).unwrap();
        let at = |name: &'static str, line| Located { name: name.as_bytes(), file: b"/app/main.go", line };
        assert_eq!(table.located(main_work, TEXT + 0x10, &mut Work::new(RUNS)), [at("main.work", 10)]);
        // Each caller on the line of its call.
        assert_eq!(
            table.located(main_work, TEXT + 0x22, &mut Work::new(RUNS)),
            [at("main.twice", 20), at("main.work", 11)]
        );
        assert_eq!(
            table.located(main_work, TEXT + 0x2c, &mut Work::new(RUNS)),
            [at("main.square", 30), at("main.twice", 21), at("main.work", 11)],
            "{version:?}"
        );
        assert_eq!(table.located(main_work, TEXT + 0x38, &mut Work::new(RUNS)), [at("main.work", 12)]);
        // A release whose module data is not known: the function alone.
        let unknown = Placement { release: Some("go1.40.1".into()), ..placement };
        let table = GoTable::new(bytes, unknown).unwrap();
        assert!(!table.reads_inlined());
        assert_eq!(table.located(main_work, TEXT + 0x2c, &mut Work::new(RUNS)), [at("main.work", 30)]);
    }
}

#[test]
fn an_inline_tree_that_loops_is_followed_only_so_far() {
    // A call whose caller's PC is in the call itself.
    let mut looping = inlining();
    looping[0].inlined = vec![("main.twice".into(), 0x22)];
    looping[0].inlined_at = vec![(0x20, -1), (0x30, 0), (0x40, -1)];
    let (bytes, placement) = table(Version::Go120, "go1.26.10", true, &looping, &["/app/main.go"]);
    let table = GoTable::new(bytes, placement).unwrap();
    let main_work = table.function(TEXT).unwrap();
    let located = table.located(main_work, TEXT + 0x22, &mut Work::new(RUNS));
    assert_eq!(located.len(), super::table::MAX_INLINED + 1);
    assert_eq!(located.last().unwrap().name, b"main.work");
    // What a stack may cost ends it sooner: lookups fail once it is spent.
    let mut little = Work::new(20);
    let located = table.located(main_work, TEXT + 0x22, &mut little);
    assert!(little.spent() && located.len() < 10, "{} frames", located.len());
    assert_eq!(table.sp_offset(main_work, TEXT, &mut little), None);
}

#[test]
fn tables_not_read_are_refused_by_what_they_are() {
    let fixture = || table(Version::Go120, "go1.26.10", true, &functions(), &FILES);
    let refusal = |(bytes, placement): (Vec<u8>, Placement)| {
        GoTable::new(bytes, placement).err().map(|why| why.to_string()).unwrap_or_default()
    };
    let mut older = fixture();
    older.0[..4].copy_from_slice(&0xffff_fffcu32.to_le_bytes());
    assert!(refusal(older).contains("not a table of Go's functions (magic 0xfffffffc)"));
    let mut go12 = table(Version::Go12, "go1.15.15", true, &functions(), &FILES);
    go12.0[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(refusal(go12).contains("more than it holds"));
    let mut arm = fixture();
    arm.0[6] = 4;
    assert!(refusal(arm).contains("not one of a 64-bit x86 binary"));
    let mut counted = fixture();
    counted.0[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(refusal(counted).contains("more than it holds"));
    let mut cut = fixture();
    cut.1.table = 0..40;
    assert!(refusal(cut).contains("shorter than its header"));
    let mut zeros = fixture();
    zeros.0.fill(0);
    assert!(refusal(zeros).contains("not a table of Go's functions"));
}

#[test]
fn a_record_that_does_not_say_its_entry_is_no_function() {
    let (mut bytes, placement) = table(Version::Go120, "go1.26.10", true, &functions(), &FILES);
    // The last record's entry: where the function table's third pair says it is.
    let function_table = u64::from_le_bytes(bytes[64..72].try_into().unwrap()) as usize;
    let pair = function_table + 2 * 8;
    let last_record =
        function_table + u32::from_le_bytes(bytes[pair + 4..pair + 8].try_into().unwrap()) as usize;
    bytes[last_record..last_record + 4].copy_from_slice(&0x1234u32.to_le_bytes());
    let table = GoTable::new(bytes, placement).unwrap();
    assert_eq!(table.function(TEXT + 0x50), None);
    assert!(table.function(TEXT + 0x10).is_some());
}

/// The stack of `main.leaf` called by `main.work` called by `runtime.goexit`'s return address:
/// stepped through both, to the goroutine's first frame.
#[test]
fn frames_are_stepped_by_their_stack_offsets_to_the_goroutines_first() {
    use crate::unwind::{RuntimeCode as _, RuntimeStep, StackSnapshot};
    let sp = 0x7000_0000u64;
    // main.leaf (no frame): the return address into main.work at sp; main.work's frame of 0x28
    // bytes: its saved frame pointer just below its return address (into goexit).
    let mut words = [0u64; 8];
    words[0] = TEXT + 0x30;
    words[5] = 0xbbbb;
    words[6] = TEXT + 1;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let stack = StackSnapshot::new(sp, &bytes, false);
    let mut process = process(table(Version::Go120, "go1.26.10", true, &functions(), &FILES));
    let mut is_code = |addr: u64| (TEXT..TEXT + 0x70).contains(&addr);
    let leaf = UnwindRegsX86_64::new(TEXT + 0x58, sp, 0xaaaa);
    let RuntimeStep::Caller(work) = process.step(0, &leaf, &stack, &mut is_code) else {
        panic!("leaf stepped")
    };
    assert_eq!((work.ip(), work.sp(), work.bp()), (TEXT + 0x30, sp + 8, 0xaaaa), "no frame: bp untouched");
    let RuntimeStep::Caller(goexit) = process.step(1, &work, &stack, &mut is_code) else {
        panic!("work stepped")
    };
    assert_eq!((goexit.ip(), goexit.sp(), goexit.bp()), (TEXT + 1, sp + 8 + 0x28 + 8, 0xbbbb));
    assert_eq!(process.step(2, &goexit, &stack, &mut is_code), RuntimeStep::Outermost);
    // Named by the call, not what follows it (here the first instruction of the next line);
    // the innermost by its PC.
    let mut functions = Functions::default();
    let mut frames = Vec::new();
    for (depth, addr) in [(0, TEXT + 0x58), (1, TEXT + 0x18), (2, TEXT + 1)] {
        assert!(process.push_frames(depth, addr, &mut functions, &mut frames));
    }
    let named: Vec<String> = frames
        .iter()
        .map(|frame| match frame {
            Frame::Runtime { function, line } => functions.symbol(*function, *line).display_name(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(named, ["main.leaf", "main.work", "runtime.goexit"]);
    let lines: Vec<u32> =
        frames.iter().map(|f| if let Frame::Runtime { line, .. } = f { *line } else { 0 }).collect();
    assert_eq!(lines, [7, 10, 400]);
    // A chain of frame pointers, which no runtime steps, ends at goexit too.
    let ends = |process: &mut GoProcess, depth, addr| Go::default().ends_stack(process, depth, addr);
    assert!(ends(&mut process, 2, TEXT + 1), "goexit starts the goroutine's stack");
    assert!(!ends(&mut process, 1, TEXT + 0x18) && !ends(&mut process, 3, TEXT + 0x100));
    assert!(!process.push_frames(3, TEXT + 0x100, &mut functions, &mut frames), "not Go's code");
    // Code outside Go's text is not its to step.
    let c = UnwindRegsX86_64::new(TEXT + 0x100, sp, 0);
    assert_eq!(process.step(0, &c, &stack, &mut is_code), RuntimeStep::NotMine);
    // A return address that is not code loses the frame.
    let mut nothing_is_code = |_: u64| false;
    assert_eq!(process.step(0, &leaf, &stack, &mut nothing_is_code), RuntimeStep::Lost);
}

/// A process whose binary's table is the fixture's, loaded where it says.
fn process((bytes, placement): (Vec<u8>, Placement)) -> GoProcess {
    let len = bytes.len();
    let mut mapped = memmap2::MmapMut::map_anon(len).unwrap();
    mapped.copy_from_slice(&bytes);
    let table = GoTable::new(mapped.make_read_only().unwrap(), placement).unwrap();
    let text = table.text().unwrap();
    GoProcess {
        binary: Arc::new(Binary::new(table)),
        module: ModuleId::from_index(0),
        bias: 0,
        text,
        names: Cache::new(&DESCRIBED),
        work: Work::new(RUNS),
        left: Default::default(),
        lost: 0,
        cut: 0,
    }
}

/// A function that moved its stack pointer to another stack (`SPWRITE`) ends what is stepped
/// of the copy when it is a caller, and is stepped as any other where the sample was taken.
#[test]
fn a_caller_that_switched_stacks_ends_the_copy() {
    use crate::unwind::{RuntimeCode as _, RuntimeStep, StackSnapshot};
    let mut functions = functions();
    functions.push(FixtureFunction {
        name: "runtime.systemstack".into(),
        size: 0x10,
        sp: vec![(0x10, 8)],
        lines: vec![(0x10, 500)],
        flag: 1 << 1,
        ..Default::default()
    });
    let mut process = process(table(Version::Go120, "go1.26.10", true, &functions, &FILES));
    let sp = 0x7000_0000u64;
    let bytes: Vec<u8> = [0u64, TEXT + 0x18].iter().flat_map(|w| w.to_le_bytes()).collect();
    let stack = StackSnapshot::new(sp, &bytes, false);
    let mut is_code = |addr: u64| (TEXT..TEXT + 0x80).contains(&addr);
    let caller = UnwindRegsX86_64::new(TEXT + 0x78, sp, 0);
    assert_eq!(process.step(1, &caller, &stack, &mut is_code), RuntimeStep::OtherStack);
    let RuntimeStep::Caller(work) = process.step(0, &caller, &stack, &mut is_code) else { panic!("stepped") };
    assert_eq!((work.ip(), work.sp()), (TEXT + 0x18, sp + 16));
}

/// A call from C back into Go (`cgocallback`, which writes SP too) is stepped as a caller: its
/// frame on the goroutine's stack leads back to the goroutine's call into C.
#[test]
fn a_call_back_from_c_is_stepped_to_the_call_into_c() {
    use crate::unwind::{RuntimeCode as _, RuntimeStep, StackSnapshot};
    let mut functions = functions();
    functions.push(function("runtime.systemstack_switch", 0x10, &[(0x10, 0)], &[(0x10, 700)], 0));
    functions.push(FixtureFunction {
        name: "runtime.cgocallback".into(),
        size: 0x10,
        sp: vec![(0x10, 0x20)],
        lines: vec![(0x10, 600)],
        flag: 1 << 1,
        ..Default::default()
    });
    let mut process = process(table(Version::Go120, "go1.26.10", true, &functions, &FILES));
    let sp = 0x7000_0000u64;
    // Its frame of 0x20 bytes, then the return address Go left the goroutine at: in
    // systemstack_switch (0x70..0x80), or elsewhere (main.work), which is not known to be it.
    let mut is_code = |addr: u64| (TEXT..TEXT + 0x90).contains(&addr);
    let callback = UnwindRegsX86_64::new(TEXT + 0x88, sp, 0);
    for (left_at, stepped) in [(TEXT + 0x78, true), (TEXT + 0x18, false)] {
        let mut words = [0u64; 6];
        words[3] = 0xbbbb;
        words[4] = left_at;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let stack = StackSnapshot::new(sp, &bytes, false);
        match process.step(1, &callback, &stack, &mut is_code) {
            RuntimeStep::Caller(left) => {
                assert!(stepped);
                assert_eq!((left.ip(), left.sp(), left.bp()), (left_at, sp + 0x28, 0xbbbb));
            }
            other => assert!(!stepped && other == RuntimeStep::OtherStack, "{other:?}"),
        }
    }
}

/// What the kernel sends of a sample whose thread left a goroutine stopped at `sched` (PC, stack
/// pointer, frame pointer) for its own stack: its stack `words` from there, cut at `len` bytes.
fn left_goroutine(sched: [u64; 3], words: &[u64], len: usize) -> Vec<u8> {
    use profiler_common::runtimes::go::{GOROUTINE_BYTES_OFFSET, GoSample};
    let mut sample: GoSample = bytemuck::Zeroable::zeroed();
    let goroutine = &mut sample.goroutine;
    [goroutine.pc, goroutine.sp, goroutine.bp] = sched;
    goroutine.len = len as u32;
    goroutine.truncated = u32::from(len < 8 * words.len());
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    goroutine.bytes[..len].copy_from_slice(&bytes[..len]);
    bytemuck::bytes_of(&sample)[..GOROUTINE_BYTES_OFFSET + len].to_vec()
}

/// A thread that left a goroutine's stack for its own (`asmcgocall`, to call C) goes on on the
/// goroutine's stack the kernel copied, from where it stopped (`systemstack_switch`, stepped
/// there and not shown) to its first frame; without a copy, or past a cut one, the stack ends.
#[test]
fn a_thread_that_left_a_goroutine_goes_on_on_the_goroutine_s_stack() {
    use profiler_common::runtimes::{RuntimeKind, RuntimeWalk};

    use crate::{
        decode::{RuntimeFrames, UserRegs},
        unwind::{RuntimeStep, StackSnapshot},
    };
    let mut functions = functions();
    functions.push(function("runtime.systemstack_switch", 0x10, &[(0x8, 0), (0x10, 8)], &[(0x10, 700)], 0));
    functions.push(FixtureFunction {
        name: "runtime.asmcgocall".into(),
        size: 0x10,
        sp: vec![(0x10, 0)],
        lines: vec![(0x10, 800)],
        flag: 1 << 1,
        ..Default::default()
    });
    let mut process = process(table(Version::Go120, "go1.26.10", true, &functions, &FILES));
    let mut go = Go::default();
    let thread_stack = StackSnapshot::new(0x7000_0000, &[0; 64], false);
    let mut is_code = |addr: u64| (TEXT..TEXT + 0x90).contains(&addr);
    let regs = UserRegs { ip: TEXT + 0x60, sp: 0x7000_0000, bp: 0, registers: [0; 2] };
    // Stopped at systemstack_switch+8 with its frame pointer pushed, called from main.work
    // (0x28 bytes of frame at 0x18), called from goexit.
    let gsp = 0xc000_1000u64;
    let mut words = [0u64; 8];
    words[0] = 0xbbbb;
    words[1] = TEXT + 0x18;
    words[6] = 0xcccc;
    words[7] = TEXT + 0x8;
    let asmcgocall = UnwindRegsX86_64::new(TEXT + 0x88, 0x7000_0010, 0);
    for (len, stepped_to_goexit) in [(64, true), (48, false), (0, false)] {
        let records = match len {
            0 => Vec::new(),
            len => left_goroutine([TEXT + 0x78, gsp, 0xaaaa], &words, len),
        };
        let sample = RuntimeFrames {
            kind: RuntimeKind::Go,
            walk: RuntimeWalk::Complete,
            records: &records,
            regs: None,
        };
        let stepper = go.stepper(&mut process, 0, &regs, sample).unwrap();
        let step = stepper.step(1, &asmcgocall, &thread_stack, &mut is_code);
        if len == 0 {
            assert_eq!(step, RuntimeStep::OtherStack, "no goroutine's stack: the thread's ends");
            continue;
        }
        let RuntimeStep::Switched(work) = step else { panic!("{len}: {step:?}") };
        assert_eq!((work.ip(), work.sp(), work.bp()), (TEXT + 0x18, gsp + 16, 0xbbbb));
        match stepper.step(2, &work, &thread_stack, &mut is_code) {
            RuntimeStep::Caller(goexit) => {
                assert!(stepped_to_goexit, "{len}");
                assert_eq!((goexit.ip(), goexit.sp(), goexit.bp()), (TEXT + 0x8, gsp + 0x40, 0xcccc));
                assert_eq!(stepper.step(3, &goexit, &thread_stack, &mut is_code), RuntimeStep::Outermost);
            }
            other => assert!(!stepped_to_goexit && other == RuntimeStep::OtherStack, "{len}: {other:?}"),
        }
        // Once: a second function that moved stacks ends what is stepped.
        assert_eq!(stepper.step(1, &asmcgocall, &thread_stack, &mut is_code), RuntimeStep::OtherStack);
    }
    assert_eq!((go.stats.left, go.stats.left_unread, go.stats.left_cut), (2, 0, 1));
}
