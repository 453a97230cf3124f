//! What tests, benchmarks and fuzz targets need beside the real inputs: records encoded as the
//! eBPF programs write them, and recorded unwinding fixtures. Compiled for the crate's own tests
//! and under the `testing` feature, never into the profiler.
mod fixture;

use std::mem::size_of;

use profiler_common::{AllocationHeader, SampleHeader, frames_offset};

pub use self::fixture::{FIXTURE_TGID, Fixture};
use crate::kernel::names::KernelNamer;

/// The recorded fixtures (`profiler/tests/fixtures`), found from any crate that uses this one
/// (the fuzz targets are built from their own folder).
pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// Naming without the eBPF object that names kernel frames: they are `[unknown kernel]`, and
/// naming says why once.
pub fn no_kernel_namer() -> anyhow::Result<KernelNamer> {
    Err(anyhow::anyhow!("no kernel namer loaded here"))
}

/// Set to 1 to skip the tests that need root (the end-to-end ones); they fail otherwise.
pub const SKIP_VAR: &str = "PROFILER_SKIP_E2E";

/// Whether to run a test that needs root (it loads eBPF programs, or reads files and processes as
/// the profiler does, as root). Without root it fails, unless the developer opted out explicitly
/// (`cargo xtask test --unit` does); a build without the eBPF programs (`--unit`'s) skips it, and
/// says so: a test that needs root never passes silently.
pub fn e2e_enabled() -> bool {
    if crate::kernel::object::EBPF_OBJECT.is_empty() {
        eprintln!("SKIPPED: built without its eBPF programs (PROFILER_EBPF=none)");
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: needs root ({SKIP_VAR}=1)");
        return false;
    }
    panic!(
        "this test needs root: run `cargo xtask test` (it uses sudo), or set {SKIP_VAR}=1 to skip such tests"
    );
}

/// Waits, up to 5 s, until process `pid`, running `comm`, sleeps: past its exec and its dynamic
/// linker, so that its mappings stay as they are and its wait has begun (a process just spawned
/// may still be starting on a loaded machine).
pub fn wait_until_asleep(pid: u32, comm: &str) {
    let asleep = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.starts_with(&format!("{pid} ({comm}) S ")))
    };
    let started = std::time::Instant::now();
    while !asleep() && started.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Serializes a sample record the way the eBPF program lays it out: `header` with its lengths
/// set from the parts, the stack copy, padding to 8 bytes, the frame-pointer user stack and the
/// kernel stack (no runtime frames).
pub fn encode_sample(
    header: &SampleHeader,
    stack_copy: &[u8],
    user_stack: &[u64],
    kernel_stack: &[u64],
) -> Vec<u8> {
    let mut header = SampleHeader {
        stack_copy_len: stack_copy.len() as u32,
        user_stack_len: user_stack.len() as u32,
        kernel_stack_len: kernel_stack.len() as u32,
        ..*header
    };
    header.runtime.frames_bytes = 0;
    let mut record = bytemuck::bytes_of(&header).to_vec();
    record.extend_from_slice(stack_copy);
    record.resize(frames_offset(stack_copy.len()), 0);
    for frame in user_stack.iter().chain(kernel_stack) {
        record.extend_from_slice(&frame.to_le_bytes());
    }
    record
}

/// Serializes an allocation record the way the eBPF program lays it out: the block, then a
/// sample record from [`encode_sample`].
pub fn encode_allocation(allocation: AllocationHeader, sample: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(size_of::<AllocationHeader>() + sample.len());
    record.extend_from_slice(bytemuck::bytes_of(&allocation));
    record.extend_from_slice(sample);
    record
}
