//! Names of kernel addresses, made by the kernel itself: an object of its own, whose one program
//! userspace runs on demand (`BPF_PROG_TEST_RUN`) with the addresses as its arguments; it is
//! never attached. `%pS` looks each address up in the kernel's own tables (its modules' and BPF
//! programs' too), where reading `/proc/kallsyms` has the kernel format all 120,000 of its
//! functions. Apart from the profiler's object, so that its user owns it (a second handle on a
//! program of that object would take `CAP_SYS_ADMIN`).
#![no_std]
#![no_main]

mod object;

use aya_ebpf::{
    cty::c_char,
    helpers::generated::bpf_snprintf,
    macros::{map, raw_tracepoint},
    maps::Array,
    programs::RawTracePointContext,
};
use profiler_common::{KERNEL_NAME_LEN, KERNEL_NAMES_PER_RUN, KernelNames};

/// Where the names are written, read back by userspace after each run.
#[map(name = "KERNEL_NAMES")]
static KERNEL_NAMES: Array<KernelNames> = Array::with_max_entries(1, 0);

/// `bpf_snprintf` takes its format only from read-only memory the verifier can read: `.rodata`,
/// which the loader freezes.
static SYMBOL_FORMAT: [u8; 4] = *b"%pS\0";

/// Names the addresses it is run with, an argument each ([`KERNEL_NAMES_PER_RUN`]), into
/// `KERNEL_NAMES`; a name the kernel could not format is left empty. Returns 1 when the map has
/// no entry.
#[raw_tracepoint]
pub fn name_kernel_addresses(ctx: RawTracePointContext) -> i32 {
    let Some(names) = KERNEL_NAMES.get_ptr_mut(0) else {
        return 1;
    };
    // Unrolled by the compiler, as it must be: the verifier takes no argument at a variable offset.
    for index in 0..KERNEL_NAMES_PER_RUN {
        let mut address: u64 = ctx.arg(index);
        // SAFETY: `names` is the map's entry, which nothing else writes while this runs (runs
        // are userspace's, one at a time); the name is as long as the size given.
        unsafe {
            let name = &mut (*names).names[index];
            let written = bpf_snprintf(
                name.as_mut_ptr().cast::<c_char>(),
                KERNEL_NAME_LEN as u32,
                SYMBOL_FORMAT.as_ptr().cast::<c_char>(),
                &mut address,
                8,
            );
            // Not the last run's name.
            if written < 0 {
                name[0] = 0;
            }
        }
    }
    0
}
