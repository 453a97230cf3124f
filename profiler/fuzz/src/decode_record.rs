//! Ring-buffer records, of every kind: any bytes decode to a record or an error, never a panic.

use profiler::RecordKind;

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    for kind in [RecordKind::Sample, RecordKind::Allocation] {
        let _ = kind.time_ns(data);
        if let Ok(record) = kind.decode(data) {
            let sample = record.sample;
            let _ = (sample.tgid(), sample.tid(), sample.time_ns(), sample.comm(), record.payload);
            let frames = sample.kernel_stack().iter().chain(sample.user_stack().iter());
            let _ = (frames.fold(0u64, u64::wrapping_add), sample.user_regs());
            let _ = (sample.stack_copy().len(), sample.stack_truncated());
        }
    }
}
