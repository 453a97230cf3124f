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

/// Folded stacks: frames root first, and counts.
pub fn read_folded(text: &str) -> Vec<(Vec<&str>, u64)> {
    text.lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            Some((stack.split(';').collect(), count.parse().ok()?))
        })
        .collect()
}

/// The function of an interpreted frame of the script called `file_name`, from the frame as the
/// profiler, py-spy and rbspy write it (`alpha (/path/shares.py:17)`, rbspy's
/// `alpha - /path/shares.rb:25`); `None` for any other frame.
pub fn script_function<'a>(frame: &'a str, file_name: &str) -> Option<&'a str> {
    let (name, place) = match frame.strip_suffix(')').and_then(|f| f.rsplit_once(" (")) {
        Some(parenthesized) => parenthesized,
        None => frame.rsplit_once(" - ")?,
    };
    let file = place.rsplit_once(':')?.0;
    (file.rsplit('/').next() == Some(file_name)).then_some(name)
}

/// Of folded stacks of the script called `file_name`: the samples, the percent of them with a
/// frame of the script, and the largest distance in points between a function's share of those
/// and what it burns (`shares`, by the names the script defines).
pub fn script_quality(
    stacks: &[(Vec<&str>, u64)],
    file_name: &str,
    shares: &[(&str, f64)],
) -> (u64, f64, f64) {
    let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
    let in_script = |keep: &dyn Fn(&str) -> bool| -> u64 {
        stacks
            .iter()
            .filter(|(frames, _)| frames.iter().filter_map(|f| script_function(f, file_name)).any(keep))
            .map(|(_, n)| n)
            .sum()
    };
    let with_script = in_script(&|_| true);
    if with_script == 0 {
        return (samples, 0.0, 100.0);
    }
    // `gamma`, or qualified as a tool names it: Python's `Burner.gamma`, Ruby's
    // `Outer::Worker#gamma`, PHP's `Outer\Worker::gamma`.
    let share_error = shares
        .iter()
        .map(|&(function, share)| {
            let named = in_script(&|name| {
                name.strip_suffix(function).is_some_and(|owner| {
                    owner.is_empty() || owner.ends_with(['.', '#']) || owner.ends_with("::")
                })
            });
            (100.0 * named as f64 / with_script as f64 - share).abs()
        })
        .fold(0.0, f64::max);
    (samples, 100.0 * with_script as f64 / samples as f64, share_error)
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

    #[test]
    fn shares_of_the_script_functions() {
        // The profiler's frames (full paths, qualified names) and py-spy's (file names) alike.
        let folded = "python3.12;_start;<module> (/w/shares.py:50);alpha (/w/shares.py:17) 50\n\
                      python3.12;<module> (/w/shares.py:50);beta (/w/shares.py:24) 30\n\
                      <module> (shares.py:50);gamma (shares.py:31) 10\n\
                      python3.12;<module> (/w/shares.py:50);Burner.gamma (/w/shares.py:31) 10\n\
                      python3.12;_start;Py_RunMain 100\n";
        let shares = [("alpha", 50.0), ("beta", 30.0), ("gamma", 20.0)];
        let (samples, with_python, share_error) = script_quality(&read_folded(folded), "shares.py", &shares);
        assert_eq!(samples, 200);
        assert!((with_python - 50.0).abs() < 1e-9);
        assert!(share_error.abs() < 1e-9);
        assert_eq!(script_function("alpha (/w/other.py:3)", "shares.py"), None);
        assert_eq!(script_function("deflate", "shares.py"), None);
    }

    #[test]
    fn ruby_frames_of_both_tools() {
        assert_eq!(
            script_function("Outer::Worker#alpha (/w/shares.rb:25)", "shares.rb"),
            Some("Outer::Worker#alpha")
        );
        assert_eq!(script_function("alpha - /w/shares.rb:25", "shares.rb"), Some("alpha"));
        assert_eq!(script_function("each - <internal:array>:3", "shares.rb"), None);
        assert_eq!(script_function("Array#each", "shares.rb"), None);
        let folded = "<main> (/w/shares.rb:58);Outer::Worker#alpha (/w/shares.rb:25) 6\n\
                      <main> - /w/shares.rb:58;block in run - /w/shares.rb:19;beta - /w/shares.rb:34 3\n\
                      <main> (/w/shares.rb:58);Outer::Worker#gamma (/w/shares.rb:43);Integer#% 1\n";
        let shares = [("alpha", 60.0), ("beta", 30.0), ("gamma", 10.0)];
        let (samples, with_ruby, share_error) = script_quality(&read_folded(folded), "shares.rb", &shares);
        assert_eq!((samples, with_ruby), (10, 100.0));
        assert!(share_error < 1e-9);
    }

    #[test]
    fn php_frames() {
        assert_eq!(
            script_function(r"Outer\Worker::alpha (/w/shares.php:33)", "shares.php"),
            Some(r"Outer\Worker::alpha")
        );
        assert_eq!(script_function("array_map", "shares.php"), None);
        let folded = "{main} (/t/count_rounds.php:14);Outer\\Worker::run (/w/shares.php:23);Outer\\Worker::alpha (/w/shares.php:33) 6\n\
                      Outer\\Worker::run (/w/shares.php:24);array_map;Outer\\Worker::{closure:Outer\\Worker::run():24} (/w/shares.php:24);Outer\\Worker::beta (/w/shares.php:41) 3\n\
                      Outer\\Worker::run (/w/shares.php:25);Outer\\Worker::gamma (/w/shares.php:49) 1\n\
                      php8.2;_start 10\n";
        let shares = [("alpha", 60.0), ("beta", 30.0), ("gamma", 10.0)];
        let (samples, with_php, share_error) = script_quality(&read_folded(folded), "shares.php", &shares);
        assert_eq!((samples, with_php), (20, 50.0));
        assert!(share_error < 1e-9);
    }
}
