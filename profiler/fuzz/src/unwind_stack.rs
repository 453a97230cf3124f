//! The unwinder on arbitrary registers and stack bytes, against the recorded fixture process
//! (a real binary and its CFI): it ends, within bounds, on code addresses only.

use std::{
    path::{Path, PathBuf},
    sync::LazyLock,
};

use profiler::{
    UserRegs,
    stages::{MAX_FRAMES, NoRuntime, Resolved, StackSnapshot, Unwinder, Want},
    testing::{FIXTURES, Fixture},
};

static DIR: LazyLock<PathBuf> = LazyLock::new(|| Path::new(FIXTURES).join("unwind"));
static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| Fixture::read(&DIR).expect("fixture"));

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    let Some((head, bytes)) = data.split_first_chunk::<24>() else { return };
    let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().unwrap());
    let fixture = &*FIXTURE;
    // Half the inputs start in the fixture's code with its real stack under the fuzzed bytes,
    // so that unwinding gets past the first frame; the rest is arbitrary.
    let (regs, stack) = if word(0) % 2 == 0 {
        let regs = UserRegs {
            ip: 0x401000 + word(0) % 0x400,
            sp: fixture.regs.sp,
            bp: word(2),
            ..UserRegs::default()
        };
        (regs, [&fixture.stack[..(word(1) as usize % (fixture.stack.len() + 1))], bytes].concat())
    } else {
        (UserRegs { ip: word(0), sp: word(1), bp: word(2), ..UserRegs::default() }, bytes.to_vec())
    };
    let snapshot = StackSnapshot::new(regs.sp, &stack, word(2) % 2 == 0);
    let mut spaces = fixture.address_spaces(DIR.join("snapshot"));
    let mut space = Fixture::view(&mut spaces);
    let unwound = Unwinder::default().unwind(regs, &snapshot, &mut space, &mut NoRuntime);
    assert!(unwound.frames.len() <= MAX_FRAMES);
    assert!(unwound.frames.len() <= stack.len() / 8 + 1);
    for &frame in &unwound.frames {
        assert_ne!(space.resolve(frame, Want::Code), Resolved::Unmapped);
    }
}
