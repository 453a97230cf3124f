//! The summary printed on the terminal at the end of a CPU recording: samples, unwind quality,
//! the kernel's cost, the top functions by self time, and the files written.
use std::path::PathBuf;

use crate::{
    model::{Recording, printable},
    render::Format,
};

/// Everything the end-of-recording summary reports.
pub struct Summary<'a> {
    pub recording: &'a Recording,
    /// Modules where DWARF unwinding stopped for lack of CFI, with sample counts.
    pub missing_cfi: &'a [(String, u64)],
    /// Processes samples came from (the recording may not keep each sample's process).
    pub processes: u64,
    /// Mean in-kernel time of the sample program, when the kernel measures it.
    pub kernel_us_per_run: Option<f64>,
    /// Mean size of the records that crossed the ring buffer.
    pub ring_bytes_per_sample: Option<f64>,
    pub outputs: &'a [(PathBuf, Format)],
}

impl Summary<'_> {
    pub fn print(&self) {
        eprint!("{}", self.render());
    }

    fn render(&self) -> String {
        let recording = self.recording;
        let meta = &recording.meta;
        let samples = recording.sample_count();
        let processes = self.processes;
        let plural = if processes == 1 { "" } else { "es" };
        let mut text = format!(
            "profiler: {samples} samples ({} lost) from {processes} process{plural} in {:.1} s at {} Hz\n",
            meta.lost_samples,
            meta.duration_ns as f64 / 1e9,
            meta.frequency_hz
        );
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
        if let Some(us) = self.kernel_us_per_run {
            row("kernel cost", vec![format!("{us:.2} µs per sample program run")]);
        }
        if let Some(bytes) = self.ring_bytes_per_sample {
            row("ring", vec![format!("{:.1} KiB per sample", bytes / 1024.0)]);
        }
        if samples > 0 {
            let top = recording
                .self_time()
                .into_iter()
                .take(5)
                .map(|(name, n)| format!("{:5.1}%  {name}", 100.0 * n as f64 / samples as f64))
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
            kernel_us_per_run: Some(2.5),
            ring_bytes_per_sample: Some(3.0 * 1024.0),
            outputs: &outputs,
        };
        let text = summary.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "profiler: 4 samples (0 lost) from 2 processes in 1.0 s at 99 Hz");
        assert!(lines[1].starts_with("  user stacks     75.0% reached the bottom"), "{}", lines[1]);
        assert!(lines[1].contains("cut by the 32 KiB stack copy, 25.0% stopped in code without CFI"));
        assert_eq!(lines[2], "  no CFI in       libjit.so (1)");
        assert_eq!(lines[3], "  kernel cost     2.50 µs per sample program run");
        assert_eq!(lines[4], "  ring            3.0 KiB per sample");
        assert_eq!(lines[5], "  top self time    50.0%  hot");
        assert_eq!(lines[8], "  wrote           a.svg (svg)");
        assert_eq!(lines[9], "                  r.prof (raw)");
    }

    #[test]
    fn names_reach_the_terminal_escaped() {
        let mut recording = fixture();
        recording.locations[2].symbols[0].name = "hot\x1b]0;owned\x07".into();
        let summary = Summary {
            recording: &recording,
            missing_cfi: &[],
            processes: 1,
            kernel_us_per_run: None,
            ring_bytes_per_sample: None,
            outputs: &[],
        };
        let text = summary.render();
        assert!(!text.contains('\x1b') && text.contains("hot\\u{1b}]0:owned\\u{7}"), "{text}");
    }
}
