//! End to end, as root: the safety contract. Profiling does not disturb the target, signals
//! still give a complete output and leave nothing behind, bad input never panics.
//!
//! The tests of this file run one at a time, from their first line (building a workload
//! included): they check that no BPF object of a profiler is left. How fast the targets run
//! under the profiler is measured by `cargo xtask bench` (section `undisturbed`), not here.

use std::{
    path::Path,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use crate::common::*;

// Alone on the machine: each workload is timed, profiled from its first instruction to its end.

/// Seconds each workload runs, profiled from its first instruction to its end.
const SECONDS: &str = "5";

/// Runs `workload SECONDS ARGS` to its end under `profiler record -F 999`, and asserts that it
/// was not disturbed: it ended by itself, successfully; its operations rose between every two
/// of its progress lines ("SECONDS OPERATIONS", every 100 ms), where a thread stuck in a
/// deadlock would have stopped them; and most samples are under `function`, named.
fn assert_undisturbed(name: &str, workload: &Path, args: &[&str], function: &str) {
    let out = scratch_dir(name).join("out.folded");
    let mut argv = vec!["record", "-F", "999", "-o", out.to_str().unwrap(), "--", workload.to_str().unwrap()];
    argv.extend(args);
    let run = run_bounded(&argv);
    assert!(run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!stderr.contains("the command exited with"), "{name} failed: {stderr}");
    let progress: Vec<(f64, u64)> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (t, ops) = line.split_once(' ').unwrap_or_else(|| panic!("bad progress line {line:?}"));
            (t.parse().unwrap(), ops.parse().unwrap())
        })
        .collect();
    let seconds: f64 = SECONDS.parse().unwrap();
    assert!(progress.len() >= 10 * seconds as usize - 1, "{name}: {} progress lines", progress.len());
    for pair in progress.windows(2) {
        assert!(pair[1].1 > pair[0].1, "{name} made no progress from {:?} to {:?}", pair[0], pair[1]);
    }
    let folded = Folded::read(&out);
    let under: u64 = folded
        .stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|f| f.split('(').next() == Some(function)))
        .map(|(_, n)| n)
        .sum();
    eprintln!("{name}: {under} of {} samples under {function}", folded.total());
    assert!(under as f64 >= 0.8 * folded.total() as f64, "{name}: most samples under {function}");
}

#[test]
fn cpp_exceptions_are_not_disturbed() {
    if !e2e_enabled() {
        return;
    }
    let _one = alone_on_the_machine();
    let workload = build_workload("exceptions.cpp", "exceptions", "g++", &["-O2", "-g"]);
    assert_undisturbed("exceptions", &workload, &[SECONDS, "2"], "worker");
}

#[test]
fn dlopen_loops_are_not_disturbed() {
    if !e2e_enabled() {
        return;
    }
    let _one = alone_on_the_machine();
    let dir = scratch_dir("dlopen-overhead-lib");
    let plugin = dir.join("libplugin.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/plugin.c");
    let status = Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&plugin)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success());
    let workload = build_workload("dlopen.c", "dlopen", "gcc", &["-O2", "-g", "-ldl"]);
    let args = [plugin.to_str().unwrap(), SECONDS, "2", "1", "100000"];
    assert_undisturbed("dlopen", &workload, &args, "plugin_work");
}

/// Names of the BPF programs and maps of any profiler loaded on the system now.
fn profiler_bpf_objects() -> Vec<String> {
    let ours = ["sample", "follow_fork", "SAMPLES", "TGID_FILTER", "COUNTERS", "STACK_ENDS"];
    let programs = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|p| p.name_as_str().map(str::to_owned));
    let maps =
        aya::maps::loaded_maps().filter_map(Result::ok).filter_map(|m| m.name_as_str().map(str::to_owned));
    programs.chain(maps).filter(|name| ours.contains(&name.as_str())).collect()
}

fn perf_event_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(Result::ok)
                .filter(|fd| {
                    std::fs::read_link(fd.path())
                        .is_ok_and(|target| target.to_string_lossy().contains("perf_event"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn signals_stop_with_complete_outputs_and_release_everything() {
    if !e2e_enabled() {
        return;
    }
    let _one = alone_on_the_machine();
    for (signal, name) in [(libc::SIGINT, "sigint"), (libc::SIGTERM, "sigterm"), (libc::SIGHUP, "sighup")] {
        let dir = scratch_dir(name);
        let workload = spawn(&split_with_frame_pointers(), &[]);
        let (svg, prof) = (dir.join("out.svg"), dir.join("run.prof"));
        let pid = workload.pid().to_string();
        let (svg_path, prof_path) = (svg.to_str().unwrap(), prof.to_str().unwrap());
        let recording = start_profiler(&["record", "-p", &pid, "-F", "499", "-o", svg_path, "-o", prof_path]);
        // Half a second of the workload's CPU time: about 250 samples.
        wait_for_cpu(workload.pid(), Duration::from_millis(500));
        assert!(
            perf_event_fds(recording.pid()) >= 2,
            "{name}: the profiler holds perf events while recording"
        );
        assert!(!profiler_bpf_objects().is_empty(), "{name}: its BPF objects are visible while recording");
        recording.signal(signal);
        let (status, stderr) = recording.wait();
        assert!(status.success(), "{name}: {stderr}");
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.trim_end().ends_with("</svg>") && text.contains("hot_a"), "{name}: complete SVG");
        let report = profiler()
            .args(["report", prof.to_str().unwrap(), "-o", dir.join("again.folded").to_str().unwrap()])
            .output()
            .unwrap();
        assert!(report.status.success(), "{name}: the raw recording is complete");
        // Released at exit; the kernel frees a raw tracepoint's program after an RCU grace period.
        let released = Instant::now();
        while !profiler_bpf_objects().is_empty() && released.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(profiler_bpf_objects(), Vec::<String>::new(), "{name}: nothing left loaded");
    }
}

/// Copies `source` with the bytes of section `section` (or of the section header table,
/// with `None`) overwritten by `fill`.
fn corrupted(source: &Path, target: &Path, section: Option<&str>, fill: u8) {
    use object::{Object as _, ObjectSection as _};
    let mut data = std::fs::read(source).unwrap();
    let range = {
        let file = object::File::parse(&*data).unwrap();
        match section {
            Some(name) => {
                let (offset, size) = file.section_by_name(name).unwrap().file_range().unwrap();
                offset as usize..(offset + size) as usize
            }
            None => {
                // e_shoff at offset 0x28 of an ELF64 header; the table runs to the end of the file.
                let shoff = u64::from_le_bytes(data[0x28..0x30].try_into().unwrap()) as usize;
                shoff..data.len()
            }
        }
    };
    data[range].fill(fill);
    std::fs::write(target, data).unwrap();
    std::fs::set_permissions(target, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

#[test]
fn corrupt_cfi_and_section_headers_do_not_break_a_recording() {
    if !e2e_enabled() {
        return;
    }
    let _one = alone_on_the_machine();
    let dir = scratch_dir("corrupt-elf");
    let good = build_workload("split.c", "split-nofp", "gcc", &["-O2", "-g", "-fomit-frame-pointer"]);
    for (name, section, fill) in [
        ("bad-eh-frame", Some(".eh_frame"), 0xff),
        ("zero-eh-frame-hdr", Some(".eh_frame_hdr"), 0x00),
        ("bad-debug-info", Some(".debug_info"), 0xa5),
        ("bad-section-headers", None, 0x5a),
    ] {
        let binary = dir.join(name);
        corrupted(&good, &binary, section, fill);
        let out = dir.join(format!("{name}.folded"));
        let mut command = profiler();
        command.args(["record", "-F", "999", "-o", out.to_str().unwrap(), "--"]).arg(&binary).arg("1");
        // The binary was just written here: it may be busy for a moment (see common::spawn).
        let output = loop {
            let output = command.output().unwrap();
            if !String::from_utf8_lossy(&output.stderr).contains("Text file busy") {
                break output;
            }
            thread::sleep(Duration::from_millis(50));
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("{name}: {stderr}");
        assert!(output.status.success(), "{name}");
        assert!(!stderr.contains("internal error"), "{name}: nothing panicked");
        assert!(Folded::read(&out).total() > 500, "{name}: samples were recorded");
    }
}

#[test]
fn empty_recording_gives_valid_empty_outputs() {
    if !e2e_enabled() {
        return;
    }
    let _one = alone_on_the_machine();
    let dir = scratch_dir("empty");
    let idle = spawn(Path::new("/bin/sleep"), &["30"]);
    let names = ["out.svg", "out.folded", "out.pb.gz", "out.json", "out.prof"];
    let mut args = vec!["record".to_owned(), "-p".into(), idle.pid().to_string(), "-d".into(), "1".into()];
    for name in names {
        args.extend(["-o".into(), dir.join(name).display().to_string()]);
    }
    let output = profiler().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("0 samples") && stderr.contains("no samples were recorded"), "{stderr}");
    let svg = std::fs::read_to_string(dir.join("out.svg")).unwrap();
    assert!(svg.contains("no samples were recorded") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(std::fs::read_to_string(dir.join("out.folded")).unwrap(), "");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("out.json")).unwrap()).unwrap();
    assert_eq!(json["profiles"].as_array().map(Vec::len), Some(0));
    let mut raw = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(dir.join("out.pb.gz")).unwrap()),
        &mut raw,
    )
    .unwrap();
    let profile = <profiler::pprof::Profile as prost::Message>::decode(&*raw).unwrap();
    assert!(profile.sample.is_empty());
    let report = profiler()
        .args([
            "report",
            dir.join("out.prof").to_str().unwrap(),
            "-o",
            dir.join("again.svg").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(report.status.success());
}

#[test]
fn max_samples_caps_the_recording() {
    if !e2e_enabled() {
        return;
    }
    let _one = alone_on_the_machine();
    let dir = scratch_dir("max-samples");
    let out = dir.join("out.folded");
    let workload = spawn(&split_with_frame_pointers(), &[]);
    let pid = workload.pid().to_string();
    // Neither -d nor a signal: a profiler that did not stop by itself would be killed, failing.
    let run = run_bounded(&[
        "record",
        "-F",
        "999",
        "--max-samples",
        "500",
        "-p",
        &pid,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("stopped at --max-samples"));
    assert_eq!(Folded::read(&out).total(), 500);
}

#[test]
fn check_reports_the_machine_and_the_targets_binaries() {
    if !e2e_enabled() {
        return;
    }
    let _one = alone_on_the_machine();
    let output = profiler().arg("check").output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    eprintln!("{stdout}");
    assert!(output.status.success());
    for subject in ["kernel ", "BTF", "privileges", "perf_event_paranoid", "RLIMIT_MEMLOCK", "sampling"] {
        let line =
            stdout.lines().find(|l| l.contains(subject)).unwrap_or_else(|| panic!("no {subject} line"));
        assert!(line.starts_with("OK") || line.starts_with("WARN"), "{line}");
    }

    // A binary with frame pointers, and one with neither CFI nor frame pointers.
    let dir = scratch_dir("check");
    let with_fp = spawn(&split_with_frame_pointers(), &[]);
    let plain = build_workload(
        "split.c",
        "split-plain",
        "gcc",
        &["-O2", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"],
    );
    let bare = dir.join("split-bare");
    let status = Command::new("objcopy")
        .args(["--remove-section", ".eh_frame", "--remove-section", ".eh_frame_hdr"])
        .arg(&plain)
        .arg(&bare)
        .status()
        .unwrap();
    assert!(status.success());
    let bare_process = spawn(&bare, &[]);
    let output = profiler()
        .args(["check", "-p", &with_fp.pid().to_string(), "-p", &bare_process.pid().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    eprintln!("{stdout}");
    let line = |name: &str| {
        stdout.lines().find(|l| l.contains(name)).unwrap_or_else(|| panic!("no line for {name}")).to_owned()
    };
    let fp = line("split-fp:");
    assert!(fp.starts_with("OK") && fp.contains("CFI for DWARF unwinding"), "{fp}");
    let share: f64 =
        fp.split("frame pointers in ").nth(1).unwrap().split('%').next().unwrap().parse().unwrap();
    assert!(share >= 50.0, "{fp}");
    let bare_line = line("split-bare:");
    assert!(bare_line.starts_with("WARN") && bare_line.contains("no CFI"), "{bare_line}");
}

#[test]
fn check_without_privileges_fails() {
    if !e2e_enabled() {
        return;
    }
    let _one = alone_on_the_machine();
    let output = as_nobody(env!("CARGO_BIN_EXE_profiler")).arg("check").output().unwrap();
    assert!(!output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    // Privileges, and the two checks that need them: sampling and the off-CPU hooks.
    for subject in ["privileges", "sampling", "off-CPU"] {
        assert!(stdout.lines().any(|l| l.starts_with(&format!("FAIL  {subject}"))), "{stdout}");
    }
    assert_eq!(String::from_utf8(output.stderr).unwrap(), "profiler: error: 3 checks failed\n");
}
