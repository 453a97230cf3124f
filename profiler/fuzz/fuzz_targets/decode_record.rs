//! Ring-buffer records: any bytes decode to a sample or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler::decode::decode;

fuzz_target!(|data: &[u8]| {
    if let Ok(sample) = decode(data) {
        let _ = (sample.tgid(), sample.tid(), sample.time_ns(), sample.comm());
        let _ = (sample.kernel_stack().len(), sample.user_stack().len(), sample.user_regs());
        let _ = (sample.stack_copy().len(), sample.stack_truncated());
    }
});
