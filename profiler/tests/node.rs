//! End to end, as root: Node programs, their JavaScript frames named from V8's perf map.
mod common;

use std::path::Path;

use common::*;

/// With `--perf-basic-prof --interpreted-frames-native-stack`, V8 writes a perf map as it
/// compiles and gives interpreted functions frames of their own: every JavaScript function is
/// named, and each gets its share.
#[test]
fn javascript_functions_named_from_the_perf_map_get_their_shares() {
    if !e2e_enabled() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/node/shares.js");
    let dir = scratch_dir("node-perf-map");
    // With a perf map V8 also writes a log, by default in the working directory.
    let log = format!("--logfile={}", dir.join("v8.log").display());
    let folded = record_command(
        &dir,
        &["--per-thread"],
        Path::new("node"),
        &[
            "--perf-basic-prof",
            "--interpreted-frames-native-stack",
            &log,
            "--no-logfile-per-isolate",
            script.to_str().unwrap(),
            "6",
        ],
    );
    let pid = javascript_pid(&folded);
    std::fs::remove_file(format!("/tmp/perf-{pid}.map")).expect("node left its map");
    assert_javascript_shares(&folded, pid);
}

/// With `--perf-prof`, V8 writes no perf map but a jitdump (`jit-PID.dump`, in its working
/// directory, mapped for tools to find): its code loads name the same functions, with the same
/// shares.
#[test]
fn javascript_functions_named_from_the_jitdump_get_their_shares() {
    if !e2e_enabled() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/node/shares.js");
    let dir = scratch_dir("node-jitdump");
    let out = dir.join("out.folded");
    let run = profiler()
        .current_dir(&dir)
        .args(["record", "-F", "999", "--per-thread", "-o", out.to_str().unwrap(), "--", "node"])
        .args([
            "--perf-prof",
            "--interpreted-frames-native-stack",
            "--logfile=v8.log",
            "--no-logfile-per-isolate",
        ])
        .args([script.to_str().unwrap(), "6"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let folded = Folded::read(&out);
    let pid = javascript_pid(&folded);
    assert!(dir.join(format!("jit-{pid}.dump")).exists(), "node wrote its jitdump where it runs");
    assert!(!Path::new(&format!("/tmp/perf-{pid}.map")).exists(), "and no perf map");
    assert_javascript_shares(&folded, pid);
}

/// The process whose JavaScript was named (its main thread's id, the root of its stacks).
fn javascript_pid(folded: &Folded) -> u32 {
    let main = folded.stacks.iter().find(|(frames, _)| frames.iter().any(|f| f.starts_with("JS:"))).unwrap();
    main.0[0].rsplit_once('-').unwrap().1.parse().unwrap()
}

/// Fails unless at least 90% of the samples of `pid`'s main thread name alpha, beta or gamma of
/// shares.js, with their shares ± 5 points.
fn assert_javascript_shares(folded: &Folded, pid: u32) {
    // The main thread's samples (V8's compiler and GC threads have their own); about a tenth of
    // them are node starting up, before the script runs.
    let stacks = thread_stacks(folded, pid);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    // The innermost of the three on each stack (V8 names them `JS:*alpha FILE:LINE:COLUMN`,
    // `*` optimized, `^` baseline, `~` interpreted).
    let mut named = [0u64; 3];
    for (frames, count) in &stacks {
        let innermost = frames.iter().rev().find_map(|frame| {
            let name = frame.strip_prefix("JS:")?.trim_start_matches(['*', '^', '~']);
            ["alpha ", "beta ", "gamma "].iter().position(|function| name.starts_with(function))
        });
        if let Some(function) = innermost {
            named[function] += count;
        }
    }
    let all: u64 = named.iter().sum();
    eprintln!("alpha, beta, gamma: {named:?} of {total} samples of the main thread");
    assert!(all as f64 >= 0.9 * total as f64, "{all} of {total} samples named");
    for (function, (samples, expected)) in
        ["alpha", "beta", "gamma"].iter().zip(named.iter().zip([60.0, 30.0, 10.0]))
    {
        let share = *samples as f64 * 100.0 / all as f64;
        assert!(
            (share - expected).abs() <= 5.0,
            "{function}: {share:.1}% of the named samples, not {expected}%"
        );
    }
}
