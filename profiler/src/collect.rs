//! The streaming stage: each ring-buffer record is decoded and its addresses are pinned to
//! (module, file offset) with the mappings of the moment, while the process still exists.
//! Symbolization waits until the end.
use crate::{
    decode::decode,
    frame::{self, Frame},
    module::Modules,
    process::Processes,
    profile::Profile,
};

#[derive(Default)]
pub struct Collector {
    processes: Processes,
    modules: Modules,
    profile: Profile,
    /// Records that did not decode (counted, never fatal).
    malformed: u64,
    /// Scratch space for one stack, reused across samples.
    frames: Vec<Frame>,
}

/// What the collector gathered.
pub struct Collected {
    pub profile: Profile,
    pub modules: Modules,
    pub malformed: u64,
}

impl Collector {
    pub fn add_record(&mut self, record: &[u8]) {
        let Ok(sample) = decode(record) else {
            self.malformed += 1;
            return;
        };
        let (tgid, tid) = (sample.tgid(), sample.tid());
        let process = self.processes.observe(tgid, tid, &sample.comm());
        self.frames.clear();
        frame::push_kernel(sample.kernel_stack(), &mut self.frames);
        frame::push_user(
            tgid,
            process,
            &mut self.modules,
            sample.user_stack(),
            &mut self.frames,
        );
        self.profile
            .add(sample.time_ns(), tgid, tid, process.comm(), &self.frames);
    }

    pub fn finish(self) -> Collected {
        Collected {
            profile: self.profile,
            modules: self.modules,
            malformed: self.malformed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{empty_header, encode};

    #[test]
    fn collects_a_record_and_counts_garbage() {
        let pid = std::process::id();
        let mut header = empty_header();
        (header.tgid, header.tid) = (pid, pid);
        header.comm[..4].copy_from_slice(b"self");
        header.kernel_stack[0] = 0xffff_ffff_8100_0000;
        header.kernel_stack_len = 1;
        header.user_stack[0] = collects_a_record_and_counts_garbage as *const () as usize as u64;
        header.user_stack_len = 1;
        let mut collector = Collector::default();
        collector.add_record(&encode(&header, &[]));
        collector.add_record(&[1, 2, 3]);
        let collected = collector.finish();
        assert_eq!(collected.profile.samples().len(), 1);
        assert_eq!(collected.malformed, 1);
        let sample = collected.profile.samples()[0];
        assert_eq!(collected.profile.comm(sample.comm), "self");
        let stack = collected.profile.stack(sample.stack);
        assert_eq!(stack[0], Frame::Kernel(0xffff_ffff_8100_0000));
        assert!(matches!(stack[1], Frame::Module { .. }), "{stack:?}");
    }
}
