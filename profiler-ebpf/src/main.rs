//! Kernel side of the profiler.
//!
//! - [`sample`]: one perf_event program run by a cpu-clock event on every CPU, and the
//!   fork tracepoint that lets the pid filter follow children (`profiler record`).
//! - [`off_cpu`]: the scheduler hooks that time followed threads off the CPU (`record
//!   --off-cpu`, `--wall`).
//! - [`leaks`]: uprobes on the allocator (`profiler leaks`).
//! - [`stack`]: what all of them record of a user stack: registers, the frame-pointer chain, a
//!   page-wise copy of the top of the stack, and the frames of [`runtimes`] walked at sample
//!   time (Python's).
//! - [`memory`]: reads of the sampled thread's user memory.
//! - [`task_storage`]: values kept on a thread's task (whether off-CPU follows it).
//!
//! Record layouts are documented in `profiler_common`. Kernel addresses are named by an object of
//! their own (`kernel_names.rs`).
#![no_std]
#![no_main]
// Atomic adds without a returned value: all the eBPF instruction set offers before v3.
#![feature(core_intrinsics)]
#![allow(internal_features)]
// Each runtime's walker programs are named after its module (`runtimes::walkers!`).
#![feature(macro_metavar_expr_concat)]

mod leaks;
mod memory;
mod object;
mod off_cpu;
mod runtimes;
mod sample;
mod stack;
mod task_storage;

use core::ptr::read_volatile;

use aya_ebpf::{macros::map, maps::Array};

/// Index 0: nonzero once userspace has stopped the recording or the tracking. Checking a flag
/// ends it at once; detaching perf events and uprobes waits for the kernel (up to 0.1 s each).
#[map(name = "CONTROL")]
static CONTROL: Array<u32> = Array::with_max_entries(1, 0);

fn stopped() -> bool {
    CONTROL.get(0).is_some_and(|&stopped| stopped != 0)
}

fn setting<T: Copy>(global: &'static T) -> T {
    // A volatile read keeps the compiler from folding in the build-time default.
    unsafe { read_volatile(global) }
}
