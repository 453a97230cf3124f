//! The unwinder on recorded fixtures (tests/fixtures/unwind, see its README): static binaries
//! without frame pointers, their registers, stack copy and memory map at one moment.
use std::path::{Path, PathBuf};

use object::{Object as _, ObjectSymbol as _};
use proptest::prelude::*;

use super::*;
use crate::testing::Fixture;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unwind").join(name)
}

fn recorded() -> Fixture {
    Fixture::read(&fixture("")).unwrap()
}

/// Function names of frames, from the symbol table of `snapshot` (non-PIE: addresses are SVMAs).
fn names(frames: &[u64]) -> Vec<String> {
    names_in("snapshot", frames)
}

fn names_in(binary: &str, frames: &[u64]) -> Vec<String> {
    let data = std::fs::read(fixture(binary)).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let mut symbols: Vec<(u64, String)> = file
        .symbols()
        .filter(|s| s.size() > 0 || s.name() == Ok("_start"))
        .map(|s| (s.address(), s.name().unwrap().to_owned()))
        .collect();
    symbols.sort();
    frames
        .iter()
        .enumerate()
        .map(|(depth, &addr)| {
            let lookup = crate::frame::lookup_address(depth, addr);
            let index = symbols.partition_point(|(start, _)| *start <= lookup);
            symbols[index - 1].1.clone()
        })
        .collect()
}

fn unwind(stack: &StackSnapshot<'_>, regs: UserRegs, binary: &str) -> Unwound {
    let mut spaces = recorded().address_spaces(fixture(binary));
    Unwinder::default().unwind(regs, stack, &mut Fixture::view(&mut spaces), &mut NoRuntime)
}

/// The fixture's one module: what its code addresses resolve to.
fn fixture_module(binary: &str) -> ModuleId {
    let fixture = recorded();
    let mut spaces = fixture.address_spaces(self::fixture(binary));
    match Fixture::view(&mut spaces).resolve(fixture.regs.ip, Want::Code) {
        Resolved::Module { module, .. } => module,
        other => panic!("the fixture's ip is in {other:?}"),
    }
}

#[test]
fn recorded_stack_unwinds_to_start() {
    let fixture = recorded();
    let stack = StackSnapshot::new(fixture.regs.sp, &fixture.stack, false);
    let unwound = unwind(&stack, fixture.regs, "snapshot");
    assert_eq!(
        names(&unwound.frames),
        ["snap", "level5", "level4", "level3", "level2", "level1", "start_main", "_start"]
    );
    assert_eq!(unwound.end, UnwindEnd::Bottom);
}

/// A sample inside libgcc's unwinder as it hands an exception to its handler: in the static
/// helper that copies the handler's registers over `_Unwind_RaiseException`'s saved ones, its
/// return address among them (tests/workloads/stoll_throw.cpp, built static with
/// `-O2 -fomit-frame-pointer`). The CFI of `_Unwind_RaiseException` then leads to the handler's
/// landing pad; its own context gives the thrower back.
#[test]
fn through_the_exception_unwinder() {
    let fixture = Fixture::read(&self::fixture("eh_return")).unwrap();
    let stack = StackSnapshot::new(fixture.regs.sp, &fixture.stack, false);
    let mut spaces = fixture.address_spaces(self::fixture("eh_return/stoll_throw"));
    let unwound =
        Unwinder::default().unwind(fixture.regs, &stack, &mut Fixture::view(&mut spaces), &mut NoRuntime);
    assert_eq!(
        names_in("eh_return/stoll_throw", &unwound.frames),
        [
            "uw_install_context_1",
            "_Unwind_RaiseException",
            "__cxa_throw",
            "_ZSt24__throw_invalid_argumentPKc",
            "_ZL11parse_emptyv.isra.0",
            "_ZL11worker_loopd",
            "execute_native_thread_routine",
            "start_thread",
            "clone3",
        ]
    );
    assert_eq!(unwound.end, UnwindEnd::Bottom);
}

#[test]
fn snapshot_cut_short() {
    let fixture = recorded();
    let full = unwind(&StackSnapshot::new(fixture.regs.sp, &fixture.stack, false), fixture.regs, "snapshot");
    // The first kilobyte holds snap's and level5..level3's frames, not level2's 1000-byte one.
    let stack = StackSnapshot::new(fixture.regs.sp, &fixture.stack[..1024], true);
    let cut = unwind(&stack, fixture.regs, "snapshot");
    assert_eq!(cut.end, UnwindEnd::SnapshotEnd);
    assert!(cut.frames.len() >= 3 && cut.frames.len() < full.frames.len(), "{:?}", names(&cut.frames));
    assert_eq!(cut.frames[..], full.frames[..cut.frames.len()]);
}

#[test]
fn module_without_cfi() {
    let fixture = recorded();
    let stack = StackSnapshot::new(fixture.regs.sp, &fixture.stack, false);
    let unwound = unwind(&stack, fixture.regs, "snapshot-nocfi");
    assert_eq!(unwound.end, UnwindEnd::MissingCfi(Some(fixture_module("snapshot-nocfi"))));
    assert_eq!(names(&unwound.frames)[0], "snap");
}

#[test]
fn unreadable_module_is_missing_cfi() {
    let fixture = recorded();
    let stack = StackSnapshot::new(fixture.regs.sp, &fixture.stack, false);
    let unwound = unwind(&stack, fixture.regs, "does-not-exist");
    assert_eq!(unwound.end, UnwindEnd::MissingCfi(Some(fixture_module("does-not-exist"))));
}

#[test]
fn ip_outside_code_is_lost() {
    let fixture = recorded();
    let stack = StackSnapshot::new(fixture.regs.sp, &fixture.stack, false);
    let regs = UserRegs { ip: 0x1234, ..fixture.regs };
    assert_eq!(
        unwind(&stack, regs, "snapshot"),
        Unwound { frames: vec![], locations: vec![], end: UnwindEnd::Lost }
    );
}

#[test]
fn stack_of_return_addresses_pointing_at_itself() {
    // Every slot holds the address of level5's return site: a stack that "loops" forever.
    let fixture = recorded();
    let full = unwind(&StackSnapshot::new(fixture.regs.sp, &fixture.stack, false), fixture.regs, "snapshot");
    let looping = full.frames[1];
    let stack_of =
        |slots: usize| -> Vec<u8> { std::iter::repeat_n(looping.to_le_bytes(), slots).flatten().collect() };
    // 64 KiB of it holds more level5 frames than the depth cap: unwinding stops there.
    let bytes = stack_of(8192);
    let unwound = unwind(&StackSnapshot::new(fixture.regs.sp, &bytes, true), fixture.regs, "snapshot");
    assert_eq!((unwound.frames.len(), unwound.end), (MAX_FRAMES, UnwindEnd::Lost));
    assert!(unwound.frames[1..].iter().all(|&frame| frame == looping));
    // 4 KiB of it ends with the copy, every step moving up the stack.
    let bytes = stack_of(512);
    let unwound = unwind(&StackSnapshot::new(fixture.regs.sp, &bytes, true), fixture.regs, "snapshot");
    assert_eq!(unwound.end, UnwindEnd::SnapshotEnd);
    assert!(unwound.frames.len() > 1 && unwound.frames.len() < bytes.len() / 16, "{}", unwound.frames.len());
}

proptest! {
    #[test]
    fn garbage_never_panics_or_loops(
        bytes in proptest::collection::vec(any::<u8>(), 0..4096),
        ip_offset in 0u64..0x400,
        sp in any::<u64>(),
        bp in any::<u64>(),
        truncated in any::<bool>(),
    ) {
        let fixture = recorded();
        let mut spaces = fixture.address_spaces(self::fixture("snapshot"));
        let mut space = Fixture::view(&mut spaces);
        // Mix the real stack in half of the cases, so that unwinding gets somewhere first.
        let bytes = if sp % 2 == 0 { [&fixture.stack[..], &bytes].concat() } else { bytes };
        let sp = if sp % 2 == 0 { fixture.regs.sp } else { sp };
        let stack = StackSnapshot::new(sp, &bytes, truncated);
        let regs = UserRegs { ip: 0x401000 + ip_offset, sp, bp, ..UserRegs::default() };
        let unwound = Unwinder::default().unwind(regs, &stack, &mut space, &mut NoRuntime);
        prop_assert!(unwound.frames.len() <= MAX_FRAMES);
        prop_assert!(unwound.frames.len() <= bytes.len() / 8 + 1);
        for &frame in &unwound.frames {
            prop_assert_ne!(space.resolve(frame, Want::Code), Resolved::Unmapped);
        }
    }
}
