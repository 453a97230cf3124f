//! End to end, as root: `record --off-cpu` and `--wall` on programs built without frame
//! pointers whose threads wait in known ways and measure themselves (tests/workloads/off_cpu.c
//! and off_cpu.rs), checked against those measurements and the kernel's schedstat.

use std::{collections::BTreeMap, path::Path};

use crate::common::*;

/// What a thread of the workload measured of itself.
#[derive(Debug)]
struct Measured {
    name: String,
    tid: u32,
    blocked_ns: u64,
    lifetime_ns: u64,
    /// From schedstat: on a CPU, and runnable waiting for one.
    run_ns: u64,
}

/// The workload's lines: `NAME TID BLOCKED_NS [LIFETIME_NS RUN_NS WAIT_NS]`.
fn measured(stdout: &str) -> BTreeMap<String, Measured> {
    stdout
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
            (fields.len() >= 3).then(|| {
                let thread = Measured {
                    name: fields[0].to_owned(),
                    tid: number(1) as u32,
                    blocked_ns: number(2),
                    lifetime_ns: number(3),
                    run_ns: number(4),
                };
                (thread.name.clone(), thread)
            })
        })
        .collect()
}

/// `profiler record --per-thread <extra> -o <dir>/out.folded -- <workload> <args>`: the folded
/// stacks (roots `comm-TID`, weights in µs), the workload's measurements and the summary.
fn record(
    dir: &Path,
    extra: &[&str],
    workload: &Path,
    args: &[&str],
) -> (Folded, BTreeMap<String, Measured>, String) {
    let out = dir.join("out.folded");
    let mut argv = vec!["record", "--per-thread", "-o", out.to_str().unwrap()];
    argv.extend(extra);
    argv.push("--");
    argv.push(workload.to_str().unwrap());
    argv.extend(args);
    let run = run_profiler(&argv);
    assert!(run.status.success());
    let stdout = String::from_utf8(run.stdout).unwrap();
    (Folded::read(&out), measured(&stdout), String::from_utf8(run.stderr).unwrap())
}

fn total(stacks: &[(&[String], u64)]) -> u64 {
    stacks.iter().map(|(_, n)| n).sum()
}

/// µs of `stacks` whose frames hold `chain` (contiguous).
fn under(stacks: &[(&[String], u64)], chain: &[&str]) -> u64 {
    stacks.iter().filter(|(frames, _)| frames.windows(chain.len()).any(|w| w == chain)).map(|(_, n)| n).sum()
}

/// µs of `stacks` with a frame whose name contains `name`.
fn with_frame(stacks: &[(&[String], u64)], name: &str) -> u64 {
    stacks.iter().filter(|(frames, _)| frames.iter().any(|f| f.contains(name))).map(|(_, n)| n).sum()
}

fn c_workload() -> std::path::PathBuf {
    build_workload("off_cpu.c", "off_cpu", "gcc", &["-O2", "-fomit-frame-pointer"])
}

/// The chain each waiting thread blocks in, from its thread function.
const CHAINS: [(&str, &[&str], &str); 3] = [
    ("sleeper", &["sleeper", "sleep_outer", "sleep_middle", "sleep_inner"], "hrtimer_nanosleep_[k]"),
    ("reader", &["reader", "read_outer", "read_middle", "read_inner"], "pipe_read_[k]"),
    ("waiter", &["waiter", "lock_outer", "lock_middle", "lock_inner"], "futex_wait"),
];

#[test]
fn off_cpu_time_by_chain_with_whole_stacks() {
    if !e2e_enabled() {
        return;
    }
    let (folded, threads, stderr) = record(&scratch_dir("off-cpu"), &["--off-cpu"], &c_workload(), &["3"]);
    assert!(stderr.contains("(0 lost)"), "{stderr}");
    // Each waiting thread's share of the blocked time, against its own measurements.
    let waiting = ["sleeper", "reader", "waiter", "writer"];
    let profiled: Vec<u64> =
        waiting.iter().map(|name| total(&thread_stacks(&folded, threads[*name].tid))).collect();
    let measured: Vec<u64> = waiting.iter().map(|name| threads[*name].blocked_ns / 1000).collect();
    let share = |values: &[u64], i: usize| 100.0 * values[i] as f64 / values.iter().sum::<u64>() as f64;
    for (i, name) in waiting.iter().enumerate() {
        let (ours, theirs) = (share(&profiled, i), share(&measured, i));
        assert!(
            (ours - theirs).abs() <= 5.0,
            "{name}: {ours:.1}% of the blocked time, measured {theirs:.1}%"
        );
    }
    for (name, chain, kernel) in CHAINS {
        let stacks = thread_stacks(&folded, threads[name].tid);
        let whole: Vec<&str> = ["__clone3", "start_thread"].iter().chain(chain).copied().collect();
        let (all, complete) = (total(&stacks), under(&stacks, &whole));
        assert!(all > 0, "{name}: no blocked time");
        assert!(complete as f64 >= 0.99 * all as f64, "{name}: {complete} of {all} µs under whole stacks");
        let in_kernel = with_frame(&stacks, kernel);
        assert!(in_kernel as f64 >= 0.99 * all as f64, "{name}: {in_kernel} of {all} µs under {kernel}");
    }
    // The threads that never block are not in an off-CPU profile, but for waits for a CPU,
    // which --off-cpu leaves out.
    for name in ["burner", "holder"] {
        let stacks = thread_stacks(&folded, threads[name].tid);
        assert!(total(&stacks) < 50_000, "{name} blocked {} µs", total(&stacks));
    }
}

#[test]
fn wall_time_accounts_for_each_thread() {
    if !e2e_enabled() {
        return;
    }
    let (folded, threads, stderr) =
        record(&scratch_dir("wall"), &["--wall", "-F", "999"], &c_workload(), &["3"]);
    assert!(stderr.contains("(0 lost)"), "{stderr}");
    for thread in threads.values() {
        let stacks = thread_stacks(&folded, thread.tid);
        let lifetime_us = thread.lifetime_ns as f64 / 1000.0;
        let accounted = total(&stacks) as f64;
        assert!(
            (accounted - lifetime_us).abs() <= 0.03 * lifetime_us,
            "{}: {accounted:.0} µs accounted for, lived {lifetime_us:.0} µs",
            thread.name
        );
        // On the CPU: everything but the blocked stacks (ending in the scheduler) and the waits
        // for a CPU.
        let off: u64 = stacks
            .iter()
            .filter(|(frames, _)| {
                frames.last().is_some_and(|leaf| leaf == "__schedule_[k]" || leaf.starts_with('['))
            })
            .map(|(_, n)| n)
            .sum();
        let on_share = 100.0 * (accounted - off as f64) / accounted;
        let schedstat_share = 100.0 * thread.run_ns as f64 / thread.lifetime_ns as f64;
        assert!(
            (on_share - schedstat_share).abs() <= 5.0,
            "{}: {on_share:.1}% on the CPU, schedstat says {schedstat_share:.1}%",
            thread.name
        );
    }
    // The CPU-bound threads share two CPUs with the rest: some of their time is a wait for one.
    let burner = thread_stacks(&folded, threads["burner"].tid);
    assert!(under(&burner, &["[runqueue]"]) > 0, "the burner never waited for a CPU");
}

#[test]
fn min_block_drops_the_shorter_blocks() {
    if !e2e_enabled() {
        return;
    }
    // 15 ms: the sleeper's 10 ms sleeps go, the reader's ~20 ms waits stay.
    let dir = scratch_dir("off-cpu-min-block");
    let raw = dir.join("run.prof");
    let extra = ["--off-cpu", "--min-block", "15000", "-o", raw.to_str().unwrap()];
    let (folded, threads, _) = record(&dir, &extra, &c_workload(), &["2"]);
    // (A sleep that also waited long for a CPU after it may pass: its thread was off the CPU
    // that long.)
    let sleeper = thread_stacks(&folded, threads["sleeper"].tid);
    let slept_us = threads["sleeper"].blocked_ns / 1000;
    assert!(under(&sleeper, &["sleep_inner"]) * 10 < slept_us, "10 ms sleeps recorded: {sleeper:?}");
    let reader = thread_stacks(&folded, threads["reader"].tid);
    let measured_us = threads["reader"].blocked_ns / 1000;
    assert!(under(&reader, &["read_inner"]) as f64 >= 0.9 * measured_us as f64, "{reader:?}");
    // The raw recording keeps each span's state: `report --state` selects by it.
    let by_state = |state: &str| {
        let out = dir.join(format!("{state}.folded"));
        let run =
            run_profiler(&["report", raw.to_str().unwrap(), "--state", state, "-o", out.to_str().unwrap()]);
        assert!(run.status.success());
        Folded::read(&out)
    };
    let (sleeping, uninterruptible) = (by_state("S"), by_state("D"));
    assert!(sleeping.total() > 1_000_000 && uninterruptible.total() * 100 < sleeping.total());
    // (Each stack's microseconds are rounded once per output.)
    let split = sleeping.total() + uninterruptible.total();
    assert!(
        split.abs_diff(folded.total()) <= 2 * folded.stacks.len() as u64,
        "{split} µs by state, {}",
        folded.total()
    );
}

#[test]
fn rust_threads_without_frame_pointers() {
    if !e2e_enabled() {
        return;
    }
    let workload = build_rust("off_cpu.rs", "off_cpu_rs", &["-C", "opt-level=3", "-C", "strip=debuginfo"]);
    let (folded, threads, _) = record(&scratch_dir("off-cpu-rust"), &["--off-cpu"], &workload, &["3"]);
    let chains = [
        (
            "sleeper",
            ["off_cpu::sleep_outer", "off_cpu::sleep_middle", "off_cpu::sleep_inner"],
            "hrtimer_nanosleep_[k]",
        ),
        (
            "receiver",
            ["off_cpu::receive_outer", "off_cpu::receive_middle", "off_cpu::receive_inner"],
            "futex_wait",
        ),
    ];
    for (name, chain, kernel) in chains {
        let stacks = thread_stacks(&folded, threads[name].tid);
        let all = total(&stacks);
        let measured_us = threads[name].blocked_ns / 1000;
        assert!(
            (all as f64 - measured_us as f64).abs() <= 0.05 * measured_us as f64,
            "{name}: {all} µs, measured {measured_us}"
        );
        // From the thread's start through the chain: __clone3 and start_thread, std's thread
        // entry, then the closure calling the chain.
        let complete: u64 = stacks
            .iter()
            .filter(|(frames, _)| {
                frames.starts_with(&["__clone3".into(), "start_thread".into()])
                    && frames.windows(3).any(|w| w == chain)
            })
            .map(|(_, n)| n)
            .sum();
        assert!(complete as f64 >= 0.99 * all as f64, "{name}: {complete} of {all} µs under whole stacks");
        let in_kernel = with_frame(&stacks, kernel);
        assert!(
            in_kernel as f64 >= 0.99 * all as f64,
            "{name}: {in_kernel} of {all} µs under {kernel}: {stacks:?}"
        );
    }
}

#[test]
fn system_wide_on_a_busy_machine() {
    if !e2e_enabled() {
        return;
    }
    // The waiting workload starts once the recording runs and ends well before it does, so that
    // what its threads measure of their own waits is what the recording must show: on a
    // crowded machine a thread also waits runnable, preempted, which neither counts as blocked.
    let busy = spawn(&split_with_frame_pointers(), &["60", "2"]);
    let dir = scratch_dir("off-cpu-system-wide");
    let out = dir.join("out.folded");
    let profiler =
        start_profiler(&["record", "-a", "--off-cpu", "--per-pid", "-d", "8", "-o", out.to_str().unwrap()]);
    let own = format!("profiler-{}", profiler.pid());
    let waiting = std::process::Command::new(c_workload())
        .arg("3")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let root = format!("off_cpu-{}", waiting.id());
    let waiting = waiting.wait_with_output().unwrap();
    let (status, stderr) = profiler.wait();
    assert!(status.success() && stderr.contains("(0 lost)"), "{stderr}");
    // Every thread of the machine that waits has an entry in the kernel's table, let go as it
    // exits: the table never fills (a full one would miss most blocks; an entry the kernel had
    // no memory for at a busy moment is a rare miss).
    let count = |what: &str| -> u64 {
        let line = stderr.lines().find(|l| l.contains("blocks recorded")).unwrap_or_default();
        line.split(", ")
            .find_map(|part| part.trim().strip_suffix(what))
            .and_then(|n| n.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    assert!(count(" blocks recorded") > 100, "{stderr}");
    assert!(
        count(" missed (no room or memory in the kernel's thread table)") * 100 <= count(" blocks recorded"),
        "{stderr}"
    );
    let threads = measured(&String::from_utf8_lossy(&waiting.stdout));
    let folded = Folded::read(&out);
    let roots = folded.roots();
    assert!(roots.contains_key(&root), "{roots:?}");
    assert!(!roots.contains_key(&own), "the profiler's own threads: {roots:?}");
    let sleeper: u64 = folded
        .stacks
        .iter()
        .filter(|(frames, _)| frames[0] == root && frames.iter().any(|f| f == "sleep_inner"))
        .map(|(_, n)| n)
        .sum();
    let measured_us = threads["sleeper"].blocked_ns / 1000;
    assert!(
        (sleeper as f64 - measured_us as f64).abs() <= 0.05 * measured_us as f64,
        "the sleeper: {sleeper} µs, measured {measured_us}\n{stderr}"
    );
    drop(busy);
}

/// Threads waiting since before the recording started, none of whose switches the kernel side
/// saw leave: one that waits through the whole recording counts for all of it, one that comes
/// back during it from the start to its return; both under the kernel stack they wait in
/// (taken as they come back, or by the task iterator at the end), the second with its user
/// frames too.
#[test]
fn threads_waiting_since_before_the_start_count_under_their_kernel_stacks() {
    if !e2e_enabled() {
        return;
    }
    let sleep = Path::new("/usr/bin/sleep");
    let (all_along, mut comes_back) = (spawn(sleep, &["60"]), spawn(sleep, &["4"]));
    // Both asleep before the profiler starts: a `sleep` still starting on a loaded machine was
    // seen to leave, and its whole 4 s counted (rightly, for a wait the recording saw begin).
    for sleeper in [&all_along, &comes_back] {
        profiler::testing::wait_until_asleep(sleeper.pid(), "sleep");
    }
    let out = scratch_dir("off-cpu-since-before").join("out.folded");
    let (pid_a, pid_b) = (all_along.pid().to_string(), comes_back.pid().to_string());
    let started = start_profiler(&[
        "record",
        "--off-cpu",
        "--per-thread",
        "-p",
        &pid_a,
        "-p",
        &pid_b,
        "-d",
        "5",
        "-o",
        out.to_str().unwrap(),
    ]);
    let started_late = comes_back.0.try_wait().unwrap().is_some();
    let (status, stderr) = started.wait();
    assert!(status.success(), "{stderr}");
    assert!(!started_late, "`sleep 4` was over before the profiler was recording: {stderr}");
    let folded = Folded::read(&out);
    for (sleeper, seconds) in [(&all_along, 5.0..5.5), (&comes_back, 0.5..4.0)] {
        let stacks = thread_stacks(&folded, sleeper.pid());
        let all = total(&stacks);
        assert!(
            seconds.contains(&(all as f64 / 1e6)),
            "{} µs off the CPU, expected {seconds:?} s: {stacks:?}",
            all
        );
        let waiting = under(&stacks, &["hrtimer_nanosleep_[k]", "__schedule_[k]"]);
        assert!(waiting as f64 >= 0.99 * all as f64, "{waiting} of {all} µs under the sleep's kernel stack");
    }
    let user =
        |frames: &[String]| frames.iter().any(|f| f.contains("clock_nanosleep") && !f.ends_with("_[k]"));
    let comes_back_stacks = thread_stacks(&folded, comes_back.pid());
    assert!(comes_back_stacks.iter().all(|(frames, _)| user(frames)), "user frames: {comes_back_stacks:?}");
}
