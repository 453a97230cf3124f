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
    // Node leaves its map: the main thread's (it runs the JavaScript) id is the process's.
    let main = folded.stacks.iter().find(|(frames, _)| frames.iter().any(|f| f.starts_with("JS:"))).unwrap();
    let pid: u32 = main.0[0].rsplit_once('-').unwrap().1.parse().unwrap();
    std::fs::remove_file(format!("/tmp/perf-{pid}.map")).expect("node left its map");
    // The main thread's samples (V8's compiler and GC threads have their own); about a tenth of
    // them are node starting up, before the script runs.
    let stacks = thread_stacks(&folded, pid);
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
