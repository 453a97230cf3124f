//! Keeping part of a recording: some processes, threads, commands, thread states, a time window,
//! no kernel frames.
use std::collections::HashMap;

use super::{Recording, Sample, Tgid, ThreadState, Tid};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Keep these processes (all when empty).
    pub pids: Vec<Tgid>,
    /// Keep these threads (all when empty).
    pub tids: Vec<Tid>,
    /// Keep these command names (all when empty).
    pub comms: Vec<String>,
    /// Keep samples in these thread states (all when empty).
    pub states: Vec<ThreadState>,
    /// Keep samples from this many nanoseconds after the start.
    pub since_ns: Option<u64>,
    /// Keep samples until this many nanoseconds after the start.
    pub until_ns: Option<u64>,
    /// Drop kernel frames.
    pub no_kernel: bool,
}

impl Recording {
    pub fn filtered(&self, filter: &Filter) -> Recording {
        let keep_comm: Vec<bool> =
            self.comms.iter().map(|c| filter.comms.is_empty() || filter.comms.contains(c)).collect();
        let samples = self
            .samples
            .iter()
            .filter(|s| {
                (filter.pids.is_empty() || filter.pids.contains(&s.pid))
                    && (filter.tids.is_empty() || filter.tids.contains(&s.tid))
                    && keep_comm.get(s.comm as usize).copied().unwrap_or(false)
                    && (filter.states.is_empty() || filter.states.contains(&s.state))
                    && filter.since_ns.is_none_or(|since| s.time_ns >= since)
                    && filter.until_ns.is_none_or(|until| s.time_ns <= until)
            })
            .copied()
            .collect();
        let mut recording = self.part(samples);
        if filter.no_kernel {
            recording.drop_kernel_frames();
            let samples = std::mem::take(&mut recording.samples);
            recording = recording.part(samples);
        }
        recording
    }

    /// A recording of `samples` (of this one) with only the stacks, locations and modules they
    /// refer to, copied: a part is no bigger than what it holds, however big the whole (an
    /// agent's window is cut into a part per service, each held until it is exported).
    fn part(&self, mut samples: Vec<Sample>) -> Recording {
        let stack_ids = renumber(self.stacks.len(), samples.iter().map(|s| s.stack));
        let kept_stacks = || kept(&self.stacks, &stack_ids);
        let location_ids = renumber(self.locations.len(), kept_stacks().flatten().copied());
        let module_ids =
            renumber(self.modules.len(), kept(&self.locations, &location_ids).filter_map(|l| l.module));
        let renumbered =
            |ids: &[Option<u32>], id: u32| ids[id as usize].expect("a kept item's parts are kept");
        let locations = kept(&self.locations, &location_ids)
            .map(|location| {
                let mut location = location.clone();
                location.module = location.module.map(|m| renumbered(&module_ids, m));
                location
            })
            .collect();
        let stacks = kept_stacks()
            .map(|stack| stack.iter().map(|&l| renumbered(&location_ids, l)).collect())
            .collect();
        for sample in &mut samples {
            sample.stack = renumbered(&stack_ids, sample.stack);
        }
        Recording {
            meta: self.meta.clone(),
            modules: kept(&self.modules, &module_ids).cloned().collect(),
            locations,
            stacks,
            comms: self.comms.clone(),
            label_sets: self.label_sets.clone(),
            samples,
        }
    }

    fn drop_kernel_frames(&mut self) {
        let mut ids: HashMap<Vec<u32>, u32> = HashMap::new();
        let mut stacks = Vec::new();
        let remap: Vec<u32> = self
            .stacks
            .iter()
            .map(|stack| {
                let user: Vec<u32> =
                    stack.iter().copied().filter(|&l| !self.locations[l as usize].is_kernel()).collect();
                *ids.entry(user.clone()).or_insert_with(|| {
                    stacks.push(user);
                    stacks.len() as u32 - 1
                })
            })
            .collect();
        self.stacks = stacks;
        for sample in &mut self.samples {
            sample.stack = remap[sample.stack as usize];
        }
    }
}

/// New numbers, in order, for the ones of `0..count` that `used` names; `None` for the others.
fn renumber(count: usize, used: impl Iterator<Item = u32>) -> Vec<Option<u32>> {
    let mut ids = vec![None; count];
    for id in used {
        ids[id as usize] = Some(0);
    }
    for (next, id) in ids.iter_mut().flatten().enumerate() {
        *id = next as u32;
    }
    ids
}

/// The items [`renumber`] gave a number, in order.
fn kept<'a, T>(items: &'a [T], ids: &'a [Option<u32>]) -> impl Iterator<Item = &'a T> {
    items.iter().zip(ids).filter(|(_, id)| id.is_some()).map(|(item, _)| item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::fixture;

    fn times(recording: &Recording) -> Vec<u64> {
        recording.samples.iter().map(|s| s.time_ns).collect()
    }

    #[test]
    fn filters_keep_only_what_they_name() {
        let recording = fixture();
        assert_eq!(times(&recording.filtered(&Filter::default())), [0, 10, 20, 30]);
        assert_eq!(times(&recording.filtered(&Filter { pids: vec![Tgid(20)], ..Default::default() })), [30]);
        assert_eq!(
            times(&recording.filtered(&Filter { tids: vec![Tid(11)], ..Default::default() })),
            [10, 20]
        );
        assert_eq!(
            times(&recording.filtered(&Filter { comms: vec!["app".into()], ..Default::default() })),
            [0, 10, 20]
        );
        let window = Filter { since_ns: Some(10), until_ns: Some(20), ..Default::default() };
        assert_eq!(times(&recording.filtered(&window)), [10, 20]);
        assert!(
            recording.filtered(&Filter { pids: vec![Tgid(99)], ..Default::default() }).samples.is_empty()
        );
        let mut blocked = fixture();
        blocked.samples[1].state = ThreadState::Sleeping;
        blocked.samples[3].state = ThreadState::Uninterruptible;
        let states = |states: &[ThreadState]| Filter { states: states.to_vec(), ..Default::default() };
        assert_eq!(times(&blocked.filtered(&states(&[ThreadState::Uninterruptible]))), [30]);
        assert_eq!(
            times(&blocked.filtered(&states(&[ThreadState::Sleeping, ThreadState::OnCpu]))),
            [0, 10, 20]
        );
    }

    #[test]
    fn a_part_keeps_only_what_its_samples_use() {
        let whole = fixture();
        let part = whole.filtered(&Filter { pids: vec![Tgid(20)], ..Default::default() });
        assert_eq!(part.samples.len(), 1);
        assert_eq!(part.stacks.len(), 1);
        let names = |r: &Recording, stack: u32| -> Vec<String> {
            r.stacks[stack as usize]
                .iter()
                .map(|&l| r.locations[l as usize].symbols[0].name.clone())
                .collect()
        };
        assert_eq!(names(&part, part.samples[0].stack), names(&whole, whole.samples[3].stack));
        assert!(part.locations.len() < whole.locations.len());
        for location in &part.locations {
            assert!(location.module.is_none_or(|m| (m as usize) < part.modules.len()));
        }
    }

    #[test]
    fn no_kernel_drops_kernel_frames() {
        let recording = fixture().filtered(&Filter { no_kernel: true, ..Default::default() });
        let last = recording.samples[3];
        let stack = &recording.stacks[last.stack as usize];
        assert!(stack.iter().all(|&l| !recording.locations[l as usize].is_kernel()));
        assert_eq!(stack.len(), 2);
        // The kernel-free stack is the same as the one of the first sample: merged.
        assert_eq!(last.stack, recording.samples[0].stack);
    }
}
