//! Reading a tool's folded stacks against what the workload is known to do.
use super::workloads::Workload;

/// How right a flame graph is.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Quality {
    pub samples: u64,
    /// Percent of the samples in the hot leaves that carry the whole chain from the root.
    pub complete: f64,
    /// Largest distance, in points, between a hot leaf's share and the expected one.
    pub share_error: f64,
}

pub fn quality(folded: &str, workload: &Workload) -> Quality {
    let stacks: Vec<(Vec<String>, u64)> = folded
        .lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            // Kernel frames sit above the leaf; inlined ones (`_[i]`, as both tools mark them) show
            // how the compiler built a chain, not a call the workload makes.
            let frames = stack
                .split(';')
                .filter(|f| !f.ends_with("_[k]") && !f.ends_with("_[i]"))
                .map(workload.normalize)
                .collect();
            Some((frames, count.parse().ok()?))
        })
        .collect();
    let samples = stacks.iter().map(|(_, n)| n).sum();
    let (mut in_leaves, mut complete) = (Vec::new(), 0u64);
    for expected in &workload.expected {
        let (mut all, mut whole) = (0, 0);
        for (frames, n) in &stacks {
            if frames.last() == Some(&expected.leaf) {
                all += n;
                if frames.ends_with(&expected.chain) {
                    whole += n;
                }
            }
        }
        in_leaves.push(all);
        complete += whole;
    }
    let total: u64 = in_leaves.iter().sum();
    if total == 0 {
        return Quality { samples, complete: 0.0, share_error: 100.0 };
    }
    let share_error = workload
        .expected
        .iter()
        .zip(&in_leaves)
        .map(|(e, &n)| (100.0 * n as f64 / total as f64 - e.share).abs())
        .fold(0.0, f64::max);
    Quality { samples, complete: 100.0 * complete as f64 / total as f64, share_error }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::bench::workloads::Expected;

    #[test]
    fn complete_stacks_and_share_error() {
        let workload = Workload {
            name: "test",
            binary: PathBuf::new(),
            args: vec![],
            expected: vec![
                Expected { leaf: "a".into(), share: 60.0, chain: vec!["main".into(), "a".into()] },
                Expected { leaf: "b".into(), share: 40.0, chain: vec!["main".into(), "b".into()] },
            ],
            normalize: |s| s.to_owned(),
        };
        let folded = "app;_start;main;a 50\napp;a 10\napp;main;call_[i];b 30\napp;main;b;sys_[k] 10\napp;main;other 100\n";
        let q = quality(folded, &workload);
        assert_eq!(q.samples, 200);
        // 90 of the 100 leaf samples have their chain; shares 60/40 exactly.
        assert!((q.complete - 90.0).abs() < 1e-9);
        assert!(q.share_error.abs() < 1e-9);
    }
}
