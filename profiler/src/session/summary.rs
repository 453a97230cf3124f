//! The summary printed on the terminal at the end of a recording: samples (or thread time by
//! state, and the stacks that blocked longest), unwind quality, the kernel's cost, the top
//! functions by self time, and the files written.
use std::{collections::HashMap, path::PathBuf};

use crate::{
    kernel::sampler::OffCpuBlocks,
    model::{Recording, ThreadState, Weight, printable},
    render::Format,
};

/// Everything the end-of-recording summary reports.
pub(crate) struct Summary<'a> {
    pub recording: &'a Recording,
    /// Modules where DWARF unwinding stopped for lack of CFI, with sample counts.
    pub missing_cfi: &'a [(String, u64)],
    /// Processes samples came from (the recording may not keep each sample's process).
    pub processes: u64,
    pub kernel: KernelFigures,
    /// What reading each runtime's stacks found: a label and lines.
    pub runtimes: &'a [(&'static str, Vec<String>)],
    pub outputs: &'a [(PathBuf, Format)],
}

/// What the kernel side measured of itself.
#[derive(Debug, Default)]
pub(crate) struct KernelFigures {
    /// Mean in-kernel time of each program that ran, in µs per run, with what a run is (when
    /// the kernel measures it).
    pub cost_us: Vec<(&'static str, f64)>,
    /// Mean size of the records that crossed the ring buffer.
    pub ring_bytes_per_record: Option<f64>,
    /// What became of the spans off the CPU.
    pub blocks: Option<OffCpuBlocks>,
}

impl Summary<'_> {
    pub(crate) fn print(&self) {
        eprint!("{}", self.render());
    }

    fn render(&self) -> String {
        let recording = self.recording;
        let meta = &recording.meta;
        let samples = recording.sample_count();
        // Spans still open at the end are counted without a record: their processes too.
        let processes = self.processes.max(recording.process_count() as u64);
        let plural = if processes == 1 { "" } else { "es" };
        let mut text = match meta.weight {
            Weight::OffCpuNs => format!(
                "profiler: {} off the CPU ({} lost) from {processes} process{plural} in {:.1} s\n",
                duration(recording.total_weight()),
                meta.lost_samples,
                meta.duration_ns as f64 / 1e9,
            ),
            Weight::WallNs => format!(
                "profiler: {} of thread time ({} lost) from {processes} process{plural} in {:.1} s at {} Hz\n",
                duration(recording.total_weight()),
                meta.lost_samples,
                meta.duration_ns as f64 / 1e9,
                meta.frequency_hz
            ),
            _ => format!(
                "profiler: {samples} samples ({} lost) from {processes} process{plural} in {:.1} s at {} Hz\n",
                meta.lost_samples,
                meta.duration_ns as f64 / 1e9,
                meta.frequency_hz
            ),
        };
        let mut row = |label: &str, lines: Vec<String>| {
            for (i, line) in lines.iter().enumerate() {
                // Names come from targets: no escape sequence reaches the terminal.
                text.push_str(&format!("  {:<15} {}\n", if i == 0 { label } else { "" }, printable(line)));
            }
        };
        let unwind = meta.unwind;
        if unwind.total() > 0 {
            let share = |n: u64| 100.0 * n as f64 / unwind.total() as f64;
            row(
                "user stacks",
                vec![format!(
                    "{:.1}% reached the bottom, {:.1}% completed with frame pointers, {:.1}% cut by the {} KiB stack copy, \
                     {:.1}% stopped in code without CFI, {:.1}% lost",
                    share(unwind.complete),
                    share(unwind.completed_with_frame_pointers),
                    share(unwind.truncated),
                    meta.stack_copy_kib,
                    share(unwind.missing_cfi),
                    share(unwind.lost)
                )],
            );
        }
        if !self.missing_cfi.is_empty() {
            let top: Vec<String> =
                self.missing_cfi.iter().take(5).map(|(name, n)| format!("{name} ({n})")).collect();
            row("no CFI in", vec![top.join(", ")]);
        }
        for (label, lines) in self.runtimes {
            row(label, lines.clone());
        }
        let kernel = &self.kernel;
        if let Some(blocks) = kernel.blocks {
            let mut line =
                format!("{} blocks recorded, {} shorter ones dropped", blocks.recorded, blocks.short);
            if blocks.without_kernel_stack > 0 {
                line += &format!(", {} without kernel frames", blocks.without_kernel_stack);
            }
            if blocks.unnoted > 0 {
                line +=
                    &format!(", {} missed (no room or memory in the kernel's thread table)", blocks.unnoted);
            }
            if blocks.over_share > 0 {
                line += &format!(
                    ", {} missed (threads of a user holding its share, a quarter, of that table)",
                    blocks.over_share
                );
            }
            row("off CPU", vec![line]);
        }
        if !kernel.cost_us.is_empty() {
            let costs: Vec<String> =
                kernel.cost_us.iter().map(|(run, us)| format!("{us:.3} µs per {run}")).collect();
            row("kernel cost", vec![costs.join(", ")]);
        }
        if let Some(bytes) = kernel.ring_bytes_per_record {
            row("ring", vec![format!("{:.2} KiB per record", bytes / 1024.0)]);
        }
        if meta.weight.is_time() && samples > 0 {
            row("by state", vec![time_by_state(recording)]);
            row("top blocking", top_blocking(recording, 5));
        }
        if meta.weight == Weight::OffCpuNs {
            // Self time off the CPU is the scheduler's: the blocking stacks above say more.
        } else if samples > 0 {
            // Of the CPU samples, or of the thread time.
            let of = if meta.weight.is_time() { recording.total_weight() } else { samples };
            let top = recording
                .self_time()
                .into_iter()
                .take(5)
                .map(|(name, n)| format!("{:5.1}%  {name}", 100.0 * n as f64 / of as f64))
                .collect();
            row("top self time", top);
        } else {
            row("", vec!["no samples were recorded (was the target idle?)".into()]);
        }
        row(
            "wrote",
            self.outputs.iter().map(|(path, format)| format!("{} ({format})", path.display())).collect(),
        );
        text
    }
}

/// `S 1.20 s (90.0%), D 0.00 s (0.0%), ...`: thread time by state, of the states present.
fn time_by_state(recording: &Recording) -> String {
    let total = recording.total_weight().max(1) as f64;
    let states =
        [ThreadState::OnCpu, ThreadState::Sleeping, ThreadState::Uninterruptible, ThreadState::Runnable];
    states
        .into_iter()
        .filter_map(|state| {
            let ns: u64 = recording.samples.iter().filter(|s| s.state == state).map(|s| s.weight).sum();
            (ns > 0)
                .then(|| format!("{} {} ({:.1}%)", state.describe(), duration(ns), 100.0 * ns as f64 / total))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `1.23 s`, `45.6 ms`, `789 µs`.
fn duration(ns: u64) -> String {
    match ns {
        0..1_000_000 => format!("{} µs", ns / 1000),
        1_000_000..1_000_000_000 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// The stacks that held threads off the CPU longest, each as where the program waited (its
/// innermost user function) and what it waited in (the innermost kernel function outside the
/// scheduler).
fn top_blocking(recording: &Recording, top: usize) -> Vec<String> {
    let mut by_place: HashMap<String, u64> = HashMap::new();
    let mut total = 0;
    for sample in recording.samples.iter().filter(|s| s.state != ThreadState::OnCpu) {
        total += sample.weight;
        *by_place.entry(blocking_place(recording, sample.stack)).or_default() += sample.weight;
    }
    let mut places: Vec<(String, u64)> = by_place.into_iter().collect();
    places.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    places
        .into_iter()
        .take(top)
        .map(|(place, ns)| format!("{:5.1}%  {place}", 100.0 * ns as f64 / total.max(1) as f64))
        .collect()
}

/// `worker_sleep ← hrtimer_nanosleep`.
fn blocking_place(recording: &Recording, stack: u32) -> String {
    const SCHEDULER: [&str; 4] = ["__schedule", "schedule", "preempt_schedule", "io_schedule"];
    let names = recording.stacks[stack as usize].iter().map(|&l| &recording.locations[l as usize]);
    let (mut user, mut kernel) = (None, None);
    for location in names {
        let Some(symbol) = location.symbols.last() else { continue };
        if location.is_kernel() {
            let scheduler = SCHEDULER.iter().any(|s| symbol.name.starts_with(s));
            if kernel.is_none() && !scheduler {
                kernel = Some(symbol.name.clone());
            }
        } else if user.is_none() {
            user = Some(symbol.display_name());
        }
    }
    match (user, kernel) {
        (Some(user), Some(kernel)) => format!("{user} ← {kernel}"),
        (user, kernel) => user.or(kernel).unwrap_or_else(|| "[no stack]".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::fixture;

    #[test]
    fn summary_table() {
        let mut recording = fixture();
        recording.meta.unwind.complete = 3;
        recording.meta.unwind.missing_cfi = 1;
        recording.meta.stack_copy_kib = 32;
        let outputs = [(PathBuf::from("a.svg"), Format::Svg), (PathBuf::from("r.prof"), Format::Raw)];
        let summary = Summary {
            recording: &recording,
            missing_cfi: &[("libjit.so".into(), 1)],
            processes: 2,
            kernel: KernelFigures {
                cost_us: vec![("sample program run", 2.5), ("context switch", 0.25)],
                ring_bytes_per_record: Some(3.0 * 1024.0),
                blocks: Some(OffCpuBlocks {
                    recorded: 7,
                    short: 90,
                    unnoted: 2,
                    over_share: 3,
                    without_kernel_stack: 1,
                }),
            },
            runtimes: &[("python", vec!["pid 9: CPython 3.14: native frames only".into()])],
            outputs: &outputs,
        };
        let text = summary.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "profiler: 4 samples (0 lost) from 2 processes in 1.0 s at 99 Hz");
        assert!(lines[1].starts_with("  user stacks     75.0% reached the bottom"), "{}", lines[1]);
        assert!(lines[1].contains("cut by the 32 KiB stack copy, 25.0% stopped in code without CFI"));
        assert_eq!(lines[2], "  no CFI in       libjit.so (1)");
        assert_eq!(lines[3], "  python          pid 9: CPython 3.14: native frames only");
        assert_eq!(
            lines[4],
            "  off CPU         7 blocks recorded, 90 shorter ones dropped, 1 without kernel frames, 2 missed (no room or memory in the kernel's thread table), 3 missed (threads of a user holding its share, a quarter, of that table)"
        );
        assert_eq!(
            lines[5],
            "  kernel cost     2.500 µs per sample program run, 0.250 µs per context switch"
        );
        assert_eq!(lines[6], "  ring            3.00 KiB per record");
        assert_eq!(lines[7], "  top self time    50.0%  hot");
        assert_eq!(lines[10], "  wrote           a.svg (svg)");
        assert_eq!(lines[11], "                  r.prof (raw)");
    }

    #[test]
    fn thread_time_by_state_and_blocking_stacks() {
        let mut recording = fixture();
        recording.meta.weight = Weight::WallNs;
        recording.meta.frequency_hz = 1000;
        // Stack 0 ends in `hot` under main; stack 2 in sys_read_[k] under hot.
        recording.samples[0].weight = 1_000_000;
        (recording.samples[1].weight, recording.samples[1].state) = (2_000_000_000, ThreadState::Sleeping);
        (recording.samples[2].weight, recording.samples[2].state) = (500_000, ThreadState::Runnable);
        (recording.samples[3].weight, recording.samples[3].state) =
            (1_000_000_000, ThreadState::Uninterruptible);
        let summary = Summary {
            recording: &recording,
            missing_cfi: &[],
            processes: 2,
            kernel: KernelFigures::default(),
            runtimes: &[],
            outputs: &[],
        };
        let text = summary.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "profiler: 3.00 s of thread time (0 lost) from 2 processes in 1.0 s at 1000 Hz");
        assert_eq!(
            lines[1],
            "  by state        on the CPU 1.0 ms (0.0%), sleeping (S) 2.00 s (66.6%), uninterruptible (D) 1.00 s \
             (33.3%), waiting for a CPU (R) 500 µs (0.0%)"
        );
        assert!(lines[2].starts_with("  top blocking     66.7%  push_back_[i]"), "{}", lines[2]);
        assert!(lines[3].contains("33.3%  hot ← sys_read"), "{}", lines[3]);
    }

    #[test]
    fn names_reach_the_terminal_escaped() {
        let mut recording = fixture();
        recording.locations[2].symbols[0].name = "hot\x1b]0;owned\x07".into();
        let summary = Summary {
            recording: &recording,
            missing_cfi: &[],
            processes: 1,
            kernel: KernelFigures::default(),
            runtimes: &[],
            outputs: &[],
        };
        let text = summary.render();
        assert!(!text.contains('\x1b') && text.contains("hot\\u{1b}]0:owned\\u{7}"), "{text}");
    }
}
