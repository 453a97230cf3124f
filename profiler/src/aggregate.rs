//! Aggregation: the samples of a recording, with their stacks interned.
use std::collections::HashSet;

use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;

use crate::frame::Frame;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommId(u32);

/// One sample: when, where, which stack, and what it weighs (1 for a CPU sample; its bytes for
/// an outstanding block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileSample {
    pub time_ns: u64,
    pub tgid: u32,
    pub tid: u32,
    /// The process's command name at the time of the sample.
    pub comm: CommId,
    pub stack: StackId,
    pub weight: u64,
}

/// Every sample of a recording. Identical stacks and names are stored once, so memory grows with
/// the number of distinct stacks, plus 32 bytes per sample.
#[derive(Debug, Default)]
pub struct Profile {
    /// FxHash: every sample hashes its whole stack here, up to 1024 frames.
    stacks: IndexSet<Box<[Frame]>, FxBuildHasher>,
    comms: IndexSet<String, FxBuildHasher>,
    samples: Vec<ProfileSample>,
    tgids: HashSet<u32>,
}

impl Profile {
    /// Adds a CPU sample whose stack is `frames`, innermost first.
    pub fn add(&mut self, time_ns: u64, tgid: u32, tid: u32, comm: &str, frames: &[Frame]) {
        let (comm, stack) = (self.intern_comm(comm), self.intern_stack(frames));
        self.push(ProfileSample { time_ns, tgid, tid, comm, stack, weight: 1 });
    }

    pub fn push(&mut self, sample: ProfileSample) {
        self.tgids.insert(sample.tgid);
        self.samples.push(sample);
    }

    /// The id of a stack (innermost frame first), stored once however often it recurs.
    pub fn intern_stack(&mut self, frames: &[Frame]) -> StackId {
        let index = match self.stacks.get_index_of(frames) {
            Some(index) => index,
            None => self.stacks.insert_full(frames.into()).0,
        };
        StackId(index as u32)
    }

    pub fn intern_comm(&mut self, comm: &str) -> CommId {
        let index = match self.comms.get_index_of(comm) {
            Some(index) => index,
            None => self.comms.insert_full(comm.to_owned()).0,
        };
        CommId(index as u32)
    }

    pub fn samples(&self) -> &[ProfileSample] {
        &self.samples
    }

    /// The frames of a stack, innermost first.
    pub fn stack(&self, id: StackId) -> &[Frame] {
        &self.stacks[id.0 as usize]
    }

    pub fn comm(&self, id: CommId) -> &str {
        &self.comms[id.0 as usize]
    }

    /// Number of distinct processes sampled.
    pub fn process_count(&self) -> usize {
        self.tgids.len()
    }

    /// Number of distinct stacks so far. Stacks are numbered in the order they were first seen.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// Every distinct frame of the stacks first seen from the `first`-th on, each once.
    pub fn distinct_frames_since(&self, first: usize) -> Vec<Frame> {
        let mut frames: Vec<Frame> =
            self.stacks[first..].iter().flat_map(|stack| stack.iter().copied()).collect();
        frames.sort_unstable();
        frames.dedup();
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interns_stacks_and_comms() {
        let mut profile = Profile::default();
        let a = [Frame::Kernel(1), Frame::Anonymous { tgid: 7, addr: 2 }];
        let b = [Frame::Anonymous { tgid: 7, addr: 3 }];
        profile.add(10, 7, 7, "app", &a);
        profile.add(20, 7, 8, "app", &a);
        profile.add(30, 7, 8, "app", &b);
        profile.add(40, 9, 9, "other", &a);
        assert_eq!(profile.samples().len(), 4);
        let described: Vec<(&str, &[Frame])> =
            profile.samples().iter().map(|s| (profile.comm(s.comm), profile.stack(s.stack))).collect();
        assert_eq!(described, [("app", &a[..]), ("app", &a[..]), ("app", &b[..]), ("other", &a[..])]);
        assert_eq!(profile.process_count(), 2);
        assert_eq!(profile.distinct_frames_since(0).len(), 3);
        assert_eq!(profile.stack_count(), 2);
        assert_eq!(profile.distinct_frames_since(1), [Frame::Anonymous { tgid: 7, addr: 3 }]);
        assert_eq!(
            profile.samples()[2],
            ProfileSample { time_ns: 30, tgid: 7, tid: 8, comm: CommId(0), stack: StackId(1), weight: 1 }
        );
    }

    #[test]
    fn empty_stack_is_a_stack() {
        let mut profile = Profile::default();
        profile.add(1, 1, 1, "idle", &[]);
        assert_eq!(profile.stack_count(), 1);
        assert!(profile.distinct_frames_since(0).is_empty());
    }

    #[test]
    fn stacks_interned_without_samples() {
        let mut profile = Profile::default();
        let frames = [Frame::Kernel(1)];
        let stack = profile.intern_stack(&frames);
        assert_eq!(profile.intern_stack(&frames), stack);
        assert!(profile.samples().is_empty());
        let comm = profile.intern_comm("app");
        profile.push(ProfileSample { time_ns: 5, tgid: 3, tid: 3, comm, stack, weight: 4096 });
        assert_eq!(profile.samples()[0].weight, 4096);
        assert_eq!(profile.process_count(), 1);
    }
}
