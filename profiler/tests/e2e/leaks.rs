//! End to end, as root: `profiler leaks` on programs whose outstanding blocks are known, checked
//! against the folded output (bytes per stack) and the text report (blocks per stack, totals).

use std::path::Path;

use crate::common::*;

// Tests share the machine, except the one that measures whether the profiler keeps up under
// load: it runs alone.

/// The allocation workloads: sibling calls kept, so that each site function stays on the stack.
fn build(source: &str) -> std::path::PathBuf {
    let name = source.trim_end_matches(".c");
    build_workload(source, name, "gcc", &["-O2", "-g", "-fno-optimize-sibling-calls"])
}

/// Runs `profiler leaks [extra] -o <dir>/out.folded -o <dir>/out.txt -- <workload>`; returns the
/// folded stacks (weights in bytes), the text report and the workload's standard output.
fn leaks(dir: &Path, extra: &[&str], workload: &Path) -> (Folded, String, String) {
    let (folded, report) = (dir.join("out.folded"), dir.join("out.txt"));
    let mut argv =
        vec!["leaks", "--top", "100", "-o", folded.to_str().unwrap(), "-o", report.to_str().unwrap()];
    argv.extend(extra);
    argv.extend(["--", workload.to_str().unwrap()]);
    let run = run_profiler(&argv);
    assert!(run.status.success());
    let report = std::fs::read_to_string(&report).expect("read the report");
    eprintln!("{report}");
    (Folded::read(&folded), report, String::from_utf8(run.stdout).unwrap())
}

/// Bytes of the stacks whose innermost user frame is `leaf`.
fn bytes_at(folded: &Folded, leaf: &str) -> u64 {
    folded.leaf_samples(leaf, &[]).0
}

/// `(bytes, blocks)` of the report's groups whose innermost frame is `leaf`.
fn report_groups(report: &str, leaf: &str) -> (u64, u64) {
    let number = |text: &str| text.replace(',', "").parse::<u64>().unwrap();
    let mut lines = report.lines().peekable();
    let (mut bytes, mut blocks) = (0, 0);
    while let Some(line) = lines.next() {
        // `#3: 4,096 bytes in 16 blocks (1.2%) · comm`, then the frames, innermost first.
        let Some(rest) = line.strip_prefix('#').and_then(|l| l.split_once(": ")).map(|(_, r)| r) else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let innermost = lines.peek().and_then(|frame| frame.split_whitespace().next());
        if innermost == Some(leaf) {
            bytes += number(words[0]);
            blocks += number(words[3]);
        }
    }
    (bytes, blocks)
}

/// The totals line: `N allocations, N frees, ...`.
fn totals(report: &str) -> (u64, u64) {
    let line = report.lines().find(|l| l.contains(" allocations, ")).expect("totals line");
    let words: Vec<u64> = line.split_whitespace().filter_map(|w| w.replace(',', "").parse().ok()).collect();
    (words[0], words[1])
}

#[test]
fn threads_that_free_everything_leak_nothing() {
    if !e2e_enabled() {
        return;
    }
    let _shared = beside_others();
    let dir = scratch_dir("leaks-threads");
    let (folded, report, _) = leaks(&dir, &[], &build("leaks_threads.c"));
    // 200 threads x 3000 blocks were all seen, allocated and freed, and none is outstanding.
    let (allocations, frees) = totals(&report);
    assert!(allocations >= 600_000 && frees >= 600_000, "{allocations} allocations, {frees} frees");
    assert_eq!(bytes_at(&folded, "hold_block"), 0);
    assert_eq!(report_groups(&report, "hold_block"), (0, 0));
    // What is left is glibc's own per-thread memory, a few KiB, not 600,000 blocks.
    assert!(folded.total() < 64 * 1024, "{} bytes outstanding", folded.total());
}

#[test]
fn exactly_the_leaked_blocks_with_their_stack() {
    if !e2e_enabled() {
        return;
    }
    let _shared = beside_others();
    let dir = scratch_dir("leaks-exact");
    let (folded, report, _) = leaks(&dir, &[], &build("leaks_exact.c"));
    assert_eq!(report_groups(&report, "leak_page"), (4_096_000, 1000));
    let (bytes, complete) = folded.leaf_samples(
        "leak_page",
        &["_start", "__libc_start_main_impl", "__libc_start_call_main", "main", "leak_page"],
    );
    assert_eq!((bytes, complete), (4_096_000, 4_096_000), "every leaked block carries its whole stack");
    // The churn thread's blocks were all freed.
    assert_eq!(bytes_at(&folded, "churn"), 0);
}

#[test]
fn exact_leaks_under_a_multithreaded_churn() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    // Eight threads churn every allocation function, some 100,000 traced allocations a second,
    // while the main thread leaks exactly 1000 pages.
    let workload = build("leaks_churn.c");
    for attach in [false, true] {
        let dir = scratch_dir(if attach { "leaks-churn-pid" } else { "leaks-churn" });
        let (folded, report) = if attach {
            // It starts once the profiler says it is tracking: every probe is in place by then.
            let go = dir.join("go");
            let running = spawn(&workload, &["3", go.to_str().unwrap()]);
            // Attached once its allocator is mapped: before, the loader may still be at work
            // and there is no malloc to probe yet.
            let maps = format!("/proc/{}/maps", running.pid());
            for _ in 0..500 {
                if std::fs::read_to_string(&maps).is_ok_and(|maps| maps.contains("libc.so")) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let pid = running.pid().to_string();
            let (folded, report) = (dir.join("out.folded"), dir.join("out.txt"));
            let (folded_arg, report_arg) = (folded.to_str().unwrap(), report.to_str().unwrap());
            let tracking =
                start_profiler(&["leaks", "--top", "100", "-o", folded_arg, "-o", report_arg, "-p", &pid]);
            std::fs::write(&go, "").unwrap();
            assert!(tracking.wait().0.success());
            (Folded::read(&folded), std::fs::read_to_string(&report).unwrap())
        } else {
            let (folded, report, _) = leaks(&dir, &[], &workload);
            (folded, report)
        };
        let how = if attach { "leaks -p" } else { "leaks --" };
        let (allocations, _) = totals(&report);
        assert!(allocations > 100_000, "{how}: {allocations} allocations: the churn did not run");
        assert_eq!(report_groups(&report, "leaky_function"), (4_096_000, 1000), "{how}");
        let chain = ["main", "do_work", "leaky_function"];
        let (bytes, complete) = folded.leaf_samples("leaky_function", &chain);
        assert_eq!((bytes, complete), (4_096_000, 4_096_000), "{how}: every page under its whole stack");
        assert!(!report.contains("were lost"), "{how}: no allocation stack dropped\n{report}");
        assert_eq!(folded.roots().get("[stack lost]"), None, "{how}");
    }
}

/// The outstanding blocks: `outstanding: N bytes in N blocks from N stacks`.
fn outstanding_blocks(report: &str) -> u64 {
    let line = report.lines().find(|l| l.starts_with("outstanding: ")).expect("outstanding line");
    line.split_whitespace().nth(4).unwrap().replace(',', "").parse().unwrap()
}

#[test]
fn cpp_operator_new_with_libstdcxx_tcmalloc_and_jemalloc() {
    if !e2e_enabled() {
        return;
    }
    let _shared = beside_others();
    for (name, allocator) in [
        ("leaks_new", None),
        ("leaks_new-tcmalloc", Some("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")),
        ("leaks_new-jemalloc", Some("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")),
    ] {
        let mut flags = vec!["-O2", "-g", "-fno-optimize-sibling-calls"];
        flags.extend(allocator.map(|library| ["-Wl,--no-as-needed", library]).into_iter().flatten());
        let workload = build_workload("leaks_new.cpp", name, "g++", &flags);
        let (folded, report, _) = leaks(&scratch_dir(name), &[], &workload);
        assert_eq!(folded.weight_through("leak_one()"), 4_096_000, "{name}: the leaked blocks");
        if allocator.is_some() {
            // Its operator new is probed itself: nothing between the program and the allocator.
            assert_eq!(bytes_at(&folded, "leak_one()"), 4_096_000, "{name}: operator new probed");
        }
        // Each call counted once, even where operator new or delete jump on to malloc or free.
        let (allocations, frees) = totals(&report);
        assert!(allocations >= 21_000, "{name}: {allocations} allocations");
        assert_eq!(
            allocations - frees,
            outstanding_blocks(&report),
            "{name}: {allocations} allocations, {frees} frees"
        );
    }
}

#[test]
fn every_allocation_function_matches_the_programs_bookkeeping() {
    if !e2e_enabled() {
        return;
    }
    let _shared = beside_others();
    let dir = scratch_dir("leaks-mix");
    let (folded, report, stdout) = leaks(&dir, &[], &build("leaks_mix.c"));
    let mut sites = 0;
    // The profiler's report goes to standard output too; its frame lines are indented.
    for line in stdout.lines().filter(|line| line.starts_with("site_")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [site, blocks, bytes] = fields[..] else { continue };
        let expected: (u64, u64) = (bytes.parse().unwrap(), blocks.parse().unwrap());
        assert!(expected.1 > 0, "{site} holds no block at exit: the workload tests nothing");
        assert_eq!(report_groups(&report, site), expected, "{site}: (bytes, blocks)");
        assert_eq!(bytes_at(&folded, site), expected.0, "{site}: bytes in the folded output");
        sites += 1;
    }
    assert_eq!(sites, 8, "the workload reports eight allocation functions:\n{stdout}");
}

#[test]
fn min_age_drops_recent_blocks_and_sampling_scales() {
    if !e2e_enabled() {
        return;
    }
    let _shared = beside_others();
    let dir = scratch_dir("leaks-min-age");
    let workload = build("leaks_exact.c");
    // Every block is younger than a minute when the program exits.
    let (folded, report, _) = leaks(&dir, &["--min-age", "60"], &workload);
    assert_eq!(folded.total(), 0, "{report}");
    // One allocation in 4 followed: the estimate lands near the truth, in multiples of 4 blocks.
    let (_, report, _) = leaks(&dir, &["--sample-every", "4"], &workload);
    let (bytes, blocks) = report_groups(&report, "leak_page");
    assert_eq!(blocks % 4, 0);
    assert!((600..=1400).contains(&blocks), "{blocks} blocks estimated, 1000 leaked");
    assert_eq!(bytes, blocks * 4096);
}

#[test]
fn bad_targets_fail_in_one_line() {
    if !e2e_enabled() {
        return;
    }
    let _shared = beside_others();
    let dir = scratch_dir("leaks-bad");
    let out = dir.join("out.txt");
    let static_binary =
        build_workload("leaks_exact.c", "leaks_exact-static", "gcc", &["-O2", "-static", "-s"]);
    for (argv, expected) in [
        (vec!["-p", "999999999"], "no process with PID 999999999"),
        (vec!["--", static_binary.to_str().unwrap()], "cannot find the allocator"),
        (vec!["--", "/nonexistent/program"], "/nonexistent/program"),
    ] {
        let mut args = vec!["leaks", "-o", out.to_str().unwrap()];
        args.extend(argv);
        let run = run_profiler(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success());
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("profiler: error:")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains(expected), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
