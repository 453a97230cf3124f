//! End to end, as root: `profiler record` on real workloads, checked on its folded output.

use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn pid_gets_the_60_30_10_split_with_whole_chains() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("pid");
    let workload = spawn(&split_with_frame_pointers(), &[]);
    let out = dir.join("out.folded");
    let pid = workload.pid().to_string();
    let recording = start_profiler(&[
        "record",
        "-p",
        &pid,
        "-F",
        "999",
        "--format",
        "folded",
        "-o",
        out.to_str().unwrap(),
    ]);
    // Five seconds of the workload's CPU time, however busy other tests keep the machine: each
    // one is worth 999 samples.
    let from = cpu_time(workload.pid());
    wait_for_cpu(workload.pid(), Duration::from_secs(5));
    let ran = cpu_time(workload.pid()) - from;
    recording.signal(libc::SIGINT);
    let (status, _) = recording.wait();
    assert!(status.success());
    let folded = Folded::read(&out);
    let expected = ran.as_secs_f64() * 999.0;
    assert!(
        folded.total() as f64 >= 0.85 * expected,
        "{} samples for {ran:?} of CPU time at 999 Hz",
        folded.total()
    );
    assert_eq!(folded.roots().keys().collect::<Vec<_>>(), ["split-fp"], "only the target is sampled");
    assert_split(&folded, "main", 3.0, 0.90);
}

#[test]
fn command_is_profiled_until_it_exits() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("command");
    let out = dir.join("out.folded");
    let workload = split_with_frame_pointers();
    let run = run_profiler(&[
        "record",
        "-F",
        "999",
        "-o",
        out.to_str().unwrap(),
        "--",
        workload.to_str().unwrap(),
        "3",
    ]);
    assert!(run.status.success());
    let folded = Folded::read(&out);
    assert_split(&folded, "main", 3.0, 0.90);
}

#[test]
fn threads_started_after_the_recording_began_are_sampled() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("late-threads");
    // Two threads start 1.5 s after launch: well after the profiler attached.
    let workload = spawn(&split_with_frame_pointers(), &["0", "2", "1500"]);
    let out = dir.join("out.folded");
    let pid = workload.pid().to_string();
    let run = run_profiler(&["record", "-p", &pid, "-F", "999", "-d", "5", "-o", out.to_str().unwrap()]);
    assert!(run.status.success());
    let folded = Folded::read(&out);
    assert!(folded.total() > 1000, "expected thousands of samples, got {}", folded.total());
    assert_split(&folded, "worker", 3.0, 0.90);
}

#[test]
fn missing_pid_is_a_one_line_error() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("missing-pid");
    let out = dir.join("out.svg");
    let run = run_profiler(&["record", "-p", "999999", "-d", "1", "-o", out.to_str().unwrap()]);
    assert!(!run.status.success());
    let stderr = String::from_utf8(run.stderr).unwrap();
    assert_eq!(stderr, "profiler: error: no process with PID 999999\n");
    assert!(!out.exists());
}

#[test]
fn sigint_still_writes_the_output() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("sigint");
    let workload = spawn(&split_with_frame_pointers(), &[]);
    let out = dir.join("out.svg");
    let recording = start_profiler(&[
        "record",
        "-p",
        &workload.pid().to_string(),
        "-F",
        "499",
        "-o",
        out.to_str().unwrap(),
    ]);
    // Half a second of the workload's CPU time: about 250 samples.
    wait_for_cpu(workload.pid(), Duration::from_millis(500));
    recording.signal(libc::SIGINT);
    let (status, _) = recording.wait();
    assert!(status.success());
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"), "complete SVG");
    assert!(svg.contains("hot_a") && svg.contains("run_round"), "the SVG shows the workload's functions");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, ["out.svg"], "no temporary files left");
}

#[test]
fn recording_ends_when_the_targets_exit() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("targets-exit");
    // The workload stops by itself after 2 s; no -d: the recording must end with it.
    let workload = spawn(&split_with_frame_pointers(), &["2"]);
    let out = dir.join("out.folded");
    let pid = workload.pid().to_string();
    let run = run_bounded(&["record", "-p", &pid, "-F", "499", "-o", out.to_str().unwrap()]);
    assert!(run.status.success(), "a target that exits is not an error");
    assert_split(&Folded::read(&out), "main", 5.0, 0.90);
}

#[test]
fn unwritable_output_fails_before_recording() {
    if !e2e_enabled() {
        return;
    }
    let run = run_profiler(&["record", "-a", "-d", "1", "-o", "/nonexistent-dir/out.svg"]);
    assert!(!run.status.success());
    let stderr = String::from_utf8(run.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("profiler: error: cannot write /nonexistent-dir/out.svg"), "{stderr}");
}

#[test]
fn without_privileges_says_so() {
    if !e2e_enabled() {
        return;
    }
    // Drop to nobody with no capabilities at all.
    let run = as_nobody(env!("CARGO_BIN_EXE_profiler"))
        .args(["record", "-a", "-d", "1", "-o", "/tmp/never-written.svg"])
        .output()
        .expect("run setpriv");
    assert!(!run.status.success());
    let stderr = String::from_utf8(run.stderr).unwrap();
    assert_eq!(
        stderr,
        "profiler: error: profiler needs root, or the CAP_BPF and CAP_PERFMON capabilities: run it with sudo\n"
    );
}

/// With only the capabilities to load and sample (as nobody, `CAP_BPF` and `CAP_PERFMON`), kernel
/// frames are named: by the kernel, through a program the profiler holds itself.
#[test]
fn kernel_frames_are_named_with_only_the_capabilities_to_sample() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("capabilities_to_sample");
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    let folded = dir.join("out.folded");
    let caps = "-all,+bpf,+perfmon";
    let run = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args([
            format!("--inh-caps={caps}"),
            format!("--ambient-caps={caps}"),
            format!("--bounding-set={caps}"),
        ])
        .arg(env!("CARGO_BIN_EXE_profiler"))
        .args(["record", "-q", "-F", "999", "-o"])
        .arg(&folded)
        .args(["--", "dd", "if=/dev/zero", "of=/dev/null", "bs=64k", "count=400000"])
        .output()
        .expect("run setpriv");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(!stderr.contains("kernel frames unnamed"), "{stderr}");
    let folded = Folded::read(&folded);
    let in_read = folded.weight_through("vfs_read_[k]");
    // dd copies 26 GB between two character devices: most of its time is in the kernel.
    assert!(in_read * 4 > folded.total(), "{in_read} of {} under vfs_read", folded.total());
}

#[test]
fn quiet_says_nothing() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("quiet");
    let workload = spawn(&split_with_frame_pointers(), &[]);
    let out = dir.join("out.folded");
    let pid = workload.pid().to_string();
    let run = run_profiler(&["record", "-q", "-p", &pid, "-d", "1", "-o", out.to_str().unwrap()]);
    assert!(run.status.success());
    assert_eq!(String::from_utf8(run.stderr).unwrap(), "", "no readiness line, status or summary");
    assert!(Folded::read(&out).total() > 0);
}

/// A Ctrl-C while naming reads debug information (the DWARF of every pyenv libpython, which
/// `--debug-info all` reads, first named all at once: about a second) ends the recording, and
/// every frame is still named (the native ones: in half a second, Python frames may not have
/// been found yet). The test runs alone: beside other tests' workloads, its eight busy processes
/// on two CPUs left naming too little of them, and it outlasted the test's bound. (Niced, they
/// got none in the short recording.)
#[test]
fn ctrl_c_during_naming_still_names_every_frame() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let dir = scratch_dir("sigint-naming");
    let interpreters: Vec<_> =
        python::interpreters().iter().filter(|interpreter| interpreter.label.starts_with("pyenv-")).collect();
    assert!(interpreters.len() >= 2, "this test needs pyenv's interpreters (shared libpython with DWARF)");
    let script = python::script("shares.py");
    let workloads: Vec<KillOnDrop> =
        interpreters.iter().map(|python| spawn(&python.path, &[script.to_str().unwrap(), "120"])).collect();
    // Each has started running the script's functions (its libpython is mapped).
    for workload in &workloads {
        wait_for_cpu(workload.pid(), Duration::from_millis(200));
    }
    let out = dir.join("out.folded");
    let pids: Vec<String> = workloads.iter().map(|workload| workload.pid().to_string()).collect();
    let mut args =
        vec!["record", "--per-thread", "--debug-info", "all", "-F", "999", "-o", out.to_str().unwrap()];
    pids.iter().for_each(|pid| args.extend(["-p", pid]));
    let recording = start_profiler(&args);
    let naming = named_thread(recording.pid(), "naming");
    // Naming is under way: running, with 50 ms of work behind it (the first libpython alone
    // takes over 100 ms), and still at it 20 ms later (not a small job of later frames).
    let waiting = Instant::now();
    let busy = |pid| matches!(thread_state(pid, naming), ('R', cpu) if cpu >= Duration::from_millis(50));
    loop {
        assert!(waiting.elapsed() < Duration::from_secs(30), "naming never got busy");
        let before = thread_state(recording.pid(), naming).1;
        if busy(recording.pid()) {
            std::thread::sleep(Duration::from_millis(20));
            if busy(recording.pid()) && thread_state(recording.pid(), naming).1 > before {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    recording.signal(libc::SIGINT);
    let (status, stderr) = recording.wait();
    assert!(status.success() && stderr.contains("profiler: stopped by signal"), "{stderr}");
    let folded = Folded::read(&out);
    for (python, workload) in interpreters.iter().zip(&workloads) {
        let stacks = thread_stacks(&folded, workload.pid());
        let frames = || stacks.iter().flat_map(|(frames, _)| frames.iter());
        assert!(
            frames().any(|frame| frame.starts_with("_PyEval_EvalFrameDefault")),
            "{}: {stacks:?}",
            python.label
        );
        let unnamed: Vec<_> =
            frames().filter(|frame| frame.contains("libpython") && frame.contains("+0x")).collect();
        assert!(unnamed.is_empty(), "{}: frames left unnamed: {unnamed:?}", python.label);
    }
}

/// The id of the thread of process `pid` called `name`, waited for.
fn named_thread(pid: u32, name: &str) -> u32 {
    let waiting = Instant::now();
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        let found =
            tasks.filter_map(|task| task.ok()?.file_name().to_str()?.parse().ok()).find(|tid: &u32| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                    .is_ok_and(|comm| comm.trim() == name)
            });
        if let Some(tid) = found {
            return tid;
        }
        assert!(waiting.elapsed() < Duration::from_secs(10), "no thread {name:?} in {pid}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The state (`R`, `S`...) of thread `tid` of `pid`, and the CPU time it used.
fn thread_state(pid: u32, tid: u32) -> (char, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    // The state is the field after the command name, in parentheses.
    let state = stat.rsplit_once(") ").unwrap().1.chars().next().unwrap();
    (state, stat_cpu_time(&stat, 14))
}
