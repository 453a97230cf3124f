//! The whole of a continuous session that writes outputs (`top -o`): its windows' recordings
//! merged as they are handed over, so that the outputs get what `record` would have written for
//! the same session. The session's aggregate and names start afresh at every window, so the
//! whole cannot be named at the end: it is kept named, window after window.
//!
//! Memory follows what `record`'s aggregate keeps: every module, location, stack and command
//! name once, and the samples counted by what the outputs tell apart (their process and thread
//! only when an output needs them), each one kept only when an output needs its time.
use indexmap::IndexSet;
use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::{
    aggregate::Detail,
    model::{LabelSet, Location, Meta, ModuleInfo, Recording, Sample, Tgid, ThreadState, Tid, intern},
};

/// The windows of a session merged into one recording.
pub(super) struct Whole {
    /// What the outputs need of each sample.
    detail: Detail,
    /// When the session started (monotonic): the samples' times count from there.
    start_ns: u64,
    modules: IndexSet<ModuleInfo, FxBuildHasher>,
    locations: IndexSet<Location, FxBuildHasher>,
    stacks: IndexSet<Vec<u32>, FxBuildHasher>,
    comms: IndexSet<String, FxBuildHasher>,
    label_sets: IndexSet<LabelSet, FxBuildHasher>,
    samples: Samples,
}

/// Stack, command, process, thread, state, labels: what counted samples are told apart by.
type CountedKey = (u32, u32, Tgid, Tid, ThreadState, u32);

enum Samples {
    /// Each sample, in time order (windows come in order, each sorted).
    Each(Vec<Sample>),
    /// Summed weights by what outputs tell apart, with the time of the first.
    Counted(FxHashMap<CountedKey, (u64, u64)>),
}

impl Whole {
    /// A session's whole, started at `start_ns` (monotonic), keeping what `detail` says of each
    /// sample.
    pub(super) fn new(detail: Detail, start_ns: u64) -> Self {
        let samples =
            if detail.time { Samples::Each(Vec::new()) } else { Samples::Counted(FxHashMap::default()) };
        Self {
            detail,
            start_ns,
            modules: IndexSet::default(),
            locations: IndexSet::default(),
            stacks: IndexSet::default(),
            comms: IndexSet::default(),
            label_sets: IndexSet::default(),
            samples,
        }
    }

    /// Adds the recording of a window opened at `opened_ns` (monotonic; its samples' times
    /// count from there).
    pub(super) fn add(&mut self, window: &Recording, opened_ns: u64) {
        let offset_ns = opened_ns.saturating_sub(self.start_ns);
        let modules: Vec<u32> =
            window.modules.iter().map(|module| intern(&mut self.modules, module) as u32).collect();
        let locations: Vec<u32> = window
            .locations
            .iter()
            .map(|location| {
                let module = location.module.map(|module| modules[module as usize]);
                intern(&mut self.locations, &Location { module, ..location.clone() }) as u32
            })
            .collect();
        let stacks: Vec<u32> = window
            .stacks
            .iter()
            .map(|stack| {
                let stack: Vec<u32> = stack.iter().map(|&location| locations[location as usize]).collect();
                intern(&mut self.stacks, &stack[..]) as u32
            })
            .collect();
        let comms: Vec<u32> =
            window.comms.iter().map(|comm| intern(&mut self.comms, &comm[..]) as u32).collect();
        // Numbered from 1, as samples refer to them (0: no labels).
        let label_sets: Vec<u32> = std::iter::once(0)
            .chain(window.label_sets.iter().map(|set| intern(&mut self.label_sets, &set[..]) as u32 + 1))
            .collect();
        for sample in &window.samples {
            self.push(Sample {
                time_ns: sample.time_ns.saturating_add(offset_ns),
                pid: if self.detail.process { sample.pid } else { Tgid(0) },
                tid: if self.detail.thread { sample.tid } else { Tid(0) },
                comm: comms[sample.comm as usize],
                stack: stacks[sample.stack as usize],
                labels: label_sets[sample.labels as usize],
                ..*sample
            });
        }
    }

    fn push(&mut self, sample: Sample) {
        match &mut self.samples {
            Samples::Each(samples) => samples.push(sample),
            Samples::Counted(counts) => {
                let key = (sample.stack, sample.comm, sample.pid, sample.tid, sample.state, sample.labels);
                counts.entry(key).or_insert((sample.time_ns, 0)).1 += sample.weight;
            }
        }
    }

    /// The session's recording, said of by `meta`.
    pub(super) fn recording(self, meta: Meta) -> Recording {
        let mut samples = match self.samples {
            Samples::Each(samples) => samples,
            Samples::Counted(counts) => counts
                .into_iter()
                .map(|((stack, comm, pid, tid, state, labels), (time_ns, weight))| Sample {
                    time_ns,
                    pid,
                    tid,
                    comm,
                    stack,
                    weight,
                    state,
                    labels,
                })
                .collect(),
        };
        samples.sort_by_key(|sample| sample.time_ns);
        Recording {
            meta,
            modules: self.modules.into_iter().collect(),
            locations: self.locations.into_iter().collect(),
            stacks: self.stacks.into_iter().collect(),
            comms: self.comms.into_iter().collect(),
            label_sets: self.label_sets.into_iter().collect(),
            samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::tests::fixture,
        render::{Format, Grouping, RenderOptions, render},
    };

    fn folded(recording: &Recording, grouping: Grouping) -> String {
        let mut out = Vec::new();
        render(Format::Folded, recording, &RenderOptions { grouping, ..RenderOptions::default() }, &mut out)
            .unwrap();
        let mut lines: Vec<String> = String::from_utf8(out).unwrap().lines().map(str::to_owned).collect();
        lines.sort();
        lines.join("\n")
    }

    /// The fixture, its tables in another order (as another window's naming may number them).
    fn reordered() -> Recording {
        let mut window = fixture();
        window.locations.reverse();
        let last = window.locations.len() as u32 - 1;
        for stack in &mut window.stacks {
            stack.iter_mut().for_each(|location| *location = last - *location);
        }
        window.comms.reverse();
        for sample in &mut window.samples {
            sample.comm = 1 - sample.comm;
        }
        window
    }

    #[test]
    fn windows_merge_into_what_one_recording_holds() {
        let detail = Detail { time: false, process: true, thread: true };
        let mut whole = Whole::new(detail, 1_000);
        whole.add(&fixture(), 1_000);
        whole.add(&reordered(), 2_000);
        let merged = whole.recording(Meta::default());
        assert_eq!(merged.locations.len(), fixture().locations.len(), "each location once");
        assert_eq!(merged.stacks.len(), fixture().stacks.len(), "each stack once");
        assert_eq!(merged.modules.len(), 1);
        assert_eq!(merged.samples.len(), 4, "counted by stack, command, process and thread");
        assert_eq!(merged.total_weight(), 8);
        let doubled = {
            let mut both = fixture();
            both.samples.iter_mut().for_each(|sample| sample.weight *= 2);
            both
        };
        assert_eq!(folded(&merged, Grouping::Thread), folded(&doubled, Grouping::Thread));
        assert_eq!(merged.samples[0].time_ns, 0, "the first one's time, from the session's start");
    }

    #[test]
    fn samples_keep_what_the_outputs_need() {
        let mut whole = Whole::new(Detail::default(), 0);
        whole.add(&fixture(), 0);
        let merged = whole.recording(Meta::default());
        assert!(merged.samples.iter().all(|s| s.pid == Tgid(0) && s.tid == Tid(0)), "no output needs them");
        assert_eq!(merged.samples.len(), 3, "by stack and command");
        let mut whole = Whole::new(Detail::ALL, 100);
        whole.add(&fixture(), 100);
        whole.add(&fixture(), 600);
        let merged = whole.recording(Meta::default());
        let times: Vec<u64> = merged.samples.iter().map(|s| s.time_ns).collect();
        assert_eq!(times, [0, 10, 20, 30, 500, 510, 520, 530], "each sample, timed from the start");
    }
}
