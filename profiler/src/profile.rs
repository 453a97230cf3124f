//! Aggregation: the samples of a recording, with their stacks interned.
use std::collections::{HashMap, HashSet};

use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;

use crate::frame::Frame;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommId(u32);

/// One sample: when, where, and which stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileSample {
    pub time_ns: u64,
    pub tgid: u32,
    pub tid: u32,
    /// The process's command name at the time of the sample.
    pub comm: CommId,
    pub stack: StackId,
}

/// Every sample of a recording. Identical stacks and names are stored once, so memory grows with
/// the number of distinct stacks, plus 24 bytes per sample.
#[derive(Debug, Default)]
pub struct Profile {
    /// FxHash: every sample hashes its whole stack here, up to 1024 frames.
    stacks: IndexSet<Box<[Frame]>, FxBuildHasher>,
    comms: IndexSet<String, FxBuildHasher>,
    samples: Vec<ProfileSample>,
    tgids: HashSet<u32>,
}

impl Profile {
    /// Adds a sample whose stack is `frames`, innermost first.
    pub fn add(&mut self, time_ns: u64, tgid: u32, tid: u32, comm: &str, frames: &[Frame]) {
        let stack = match self.stacks.get_index_of(frames) {
            Some(index) => index,
            None => self.stacks.insert_full(frames.into()).0,
        };
        let comm = match self.comms.get_index_of(comm) {
            Some(index) => index,
            None => self.comms.insert_full(comm.to_owned()).0,
        };
        self.tgids.insert(tgid);
        self.samples.push(ProfileSample {
            time_ns,
            tgid,
            tid,
            comm: CommId(comm as u32),
            stack: StackId(stack as u32),
        });
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

    /// Sample counts per (command name, stack), in first-seen order.
    pub fn stack_counts(&self) -> Vec<(CommId, StackId, u64)> {
        let mut counts: HashMap<(CommId, StackId), u64> = HashMap::new();
        for sample in &self.samples {
            *counts.entry((sample.comm, sample.stack)).or_default() += 1;
        }
        let mut counts: Vec<_> = counts.into_iter().map(|((comm, stack), n)| (comm, stack, n)).collect();
        counts.sort_unstable();
        counts
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
        let counts = profile.stack_counts();
        let described: Vec<(&str, &[Frame], u64)> =
            counts.iter().map(|&(comm, stack, n)| (profile.comm(comm), profile.stack(stack), n)).collect();
        assert_eq!(described, [("app", &a[..], 2), ("app", &b[..], 1), ("other", &a[..], 1)]);
        assert_eq!(profile.process_count(), 2);
        assert_eq!(profile.distinct_frames_since(0).len(), 3);
        assert_eq!(profile.stack_count(), 2);
        assert_eq!(profile.distinct_frames_since(1), [Frame::Anonymous { tgid: 7, addr: 3 }]);
        assert_eq!(
            profile.samples()[2],
            ProfileSample { time_ns: 30, tgid: 7, tid: 8, comm: CommId(0), stack: StackId(1) }
        );
    }

    #[test]
    fn empty_stack_is_a_stack() {
        let mut profile = Profile::default();
        profile.add(1, 1, 1, "idle", &[]);
        assert_eq!(profile.stack_counts().len(), 1);
        assert!(profile.distinct_frames_since(0).is_empty());
    }
}
