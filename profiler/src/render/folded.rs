//! Folded stacks: `root;outer;...;leaf COUNT`, one line per distinct stack, sorted; COUNT is the
//! samples' summed weight (samples, bytes for outstanding blocks, microseconds of thread time
//! off or on the CPU). Kernel
//! frames end in `_[k]`, inlined ones in `_[i]`, JIT ones in `_[j]` (the conventions of perf and
//! FlameGraph, which inferno's palettes colour). Under the root, a frame `KEY=value` when stacks
//! are told apart by a label (`--by-label KEY`).
use std::{collections::BTreeMap, io::Write};

use crate::model::{Recording, Symbol, folded_frame, printable};

/// What the root frame of each stack is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Grouping {
    /// The process's command name, as perf does.
    #[default]
    Command,
    /// `comm-pid`.
    Process,
    /// `comm-tid`.
    Thread,
    /// No root frame.
    None,
}

pub type Folded = BTreeMap<String, u64>;

/// The stacks of `recording` under a root frame as `grouping` says, and under a frame of the
/// value of the label `by_label` (`KEY=[none]` for samples without it), when asked.
pub fn collapse(recording: &Recording, grouping: Grouping, by_label: Option<&str>) -> Folded {
    let mut counts: BTreeMap<(Vec<String>, u32), u64> = BTreeMap::new();
    for sample in &recording.samples {
        let comm = &recording.comms[sample.comm as usize];
        let root = match grouping {
            Grouping::Command => Some(folded_frame(comm).into_owned()),
            Grouping::Process => Some(format!("{}-{}", folded_frame(comm), sample.pid)),
            Grouping::Thread => Some(format!("{}-{}", folded_frame(comm), sample.tid)),
            Grouping::None => None,
        };
        let label = by_label.map(|key| {
            let value = recording.labels(sample).iter().find(|(k, _)| k == key).map(|(_, value)| value);
            folded_frame(&printable(&format!("{key}={}", value.map_or("[none]", String::as_str))))
                .into_owned()
        });
        *counts.entry((root.into_iter().chain(label).collect(), sample.stack)).or_default() += sample.weight;
    }
    // Thread time shows in microseconds (what a nanosecond-wide frame could not).
    let unit = if recording.meta.weight.is_time() { 1000 } else { 1 };
    let mut folded = Folded::new();
    for ((roots, stack), count) in counts {
        let count = (count + unit / 2) / unit;
        if count == 0 {
            continue;
        }
        let mut frames = roots;
        for &location in recording.stacks[stack as usize].iter().rev() {
            frames.extend(recording.locations[location as usize].symbols.iter().map(Symbol::display_name));
        }
        if frames.is_empty() {
            frames.push("[no stack]".into());
        }
        *folded.entry(frames.join(";")).or_default() += count;
    }
    folded
}

pub fn write(folded: &Folded, out: &mut dyn Write) -> std::io::Result<()> {
    for (stack, count) in folded {
        writeln!(out, "{stack} {count}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Weight, tests::fixture};

    fn lines(folded: &Folded) -> Vec<(&str, u64)> {
        folded.iter().map(|(s, n)| (s.as_str(), *n)).collect()
    }

    #[test]
    fn folds_root_first_with_suffixes() {
        let folded = collapse(&fixture(), Grouping::Command, None);
        assert_eq!(
            lines(&folded),
            [("app;main;hot", 2), ("app;main;work;push_back_[i]", 1), ("other;main;hot;sys_read_[k]", 1)]
        );
    }

    #[test]
    fn groupings() {
        let recording = fixture();
        let roots = |grouping| {
            let folded = collapse(&recording, grouping, None);
            folded.keys().map(|k| k.split(';').next().unwrap().to_owned()).collect::<Vec<_>>()
        };
        assert_eq!(roots(Grouping::Process), ["app-10", "app-10", "other-20"]);
        assert_eq!(roots(Grouping::Thread), ["app-10", "app-11", "app-11", "other-20"]);
        assert_eq!(lines(&collapse(&recording, Grouping::None, None))[0], ("main;hot", 2));
    }

    #[test]
    fn stacks_told_apart_by_a_label() {
        let folded = collapse(&fixture(), Grouping::Command, Some("endpoint"));
        assert_eq!(
            lines(&folded),
            [
                ("app;endpoint=/api;main;work;push_back_[i]", 1),
                ("app;endpoint=[none];main;hot", 2),
                ("other;endpoint=[none];main;hot;sys_read_[k]", 1)
            ]
        );
    }

    #[test]
    fn text_format() {
        let mut recording = fixture();
        recording.locations[2].symbols[0].name = "a;b".into();
        let mut out = Vec::new();
        write(&collapse(&recording, Grouping::Command, None), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "app;main;a:b 2\napp;main;work;push_back_[i] 1\nother;main;a:b;sys_read_[k] 1\n"
        );
    }

    #[test]
    fn thread_time_folds_in_microseconds() {
        let mut recording = fixture();
        recording.meta.weight = Weight::WallNs;
        for (sample, ns) in recording.samples.iter_mut().zip([1_000_000, 2_499, 1_500, 400]) {
            sample.weight = ns;
        }
        // main;hot: 1,000,000 + 1,500 ns; work: 2,499 ns -> 2 µs; other: 400 ns, under a µs.
        assert_eq!(
            lines(&collapse(&recording, Grouping::Command, None)),
            [("app;main;hot", 1002), ("app;main;work;push_back_[i]", 2)]
        );
    }
}
