//! End to end, as root: what an unprivileged user (nobody) plants where root writes or reads.
//! Links, FIFOs and files of theirs at output paths and on the way to them, in a sticky shared
//! directory like /tmp; their files in the agent's output directory; a perf map planted for a
//! process of root's. Each planted thing is checked to have been met (the profiler names it, or
//! it is still there untouched), and each case has a control that the same run writes or reads
//! what it should.

use std::{
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Output},
};

use crate::common::*;

/// The test's scratch directory (root's), and a fresh sticky directory everyone may write in,
/// as /tmp is (inside /tmp, so that nobody can reach it).
fn shared_dir(test: &str) -> (PathBuf, PathBuf) {
    let shared = PathBuf::from(format!("/tmp/profiler-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&shared);
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    (scratch_dir(test), shared)
}

/// Runs `command` as nobody, which must succeed.
fn nobody(program: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) {
    let status = as_nobody(program).args(args.iter().map(|a| a.as_ref())).status().unwrap();
    assert!(
        status.success(),
        "as nobody: {program} {:?}",
        args.iter().map(|a| a.as_ref()).collect::<Vec<_>>()
    );
}

/// One second of the 60/30/10 workload recorded into `outputs`.
fn record_split(outputs: &[&Path]) -> Output {
    let split = build_workload("split.c", "split-planted", "gcc", &["-O2", "-g"]);
    let mut args = vec!["record".to_owned(), "-F".into(), "499".into()];
    for output in outputs {
        args.extend(["-o".to_owned(), output.to_str().unwrap().to_owned()]);
    }
    args.extend(["--".to_owned(), split.to_str().unwrap().to_owned(), "1".into()]);
    run_bounded(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn stderr(run: &Output) -> String {
    String::from_utf8_lossy(&run.stderr).into_owned()
}

#[test]
fn links_fifos_and_files_planted_at_output_paths_are_refused() {
    if !e2e_enabled() {
        return;
    }
    let (scratch, shared) = shared_dir("planted-outputs");
    // Root's file that the links point at, and a directory of root's.
    let victim = scratch.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let root_dir = scratch.join("root-only");
    std::fs::create_dir(&root_dir).unwrap();
    nobody("ln", &[&"-s", &victim, &shared.join("profile.folded")]);
    nobody("ln", &[&"-s", &"/dev/loop0", &shared.join("device.folded")]);
    nobody("mkfifo", &[&shared.join("pipe.folded")]);
    nobody("touch", &[&shared.join("theirs.folded")]);
    nobody("ln", &[&"-s", &root_dir, &shared.join("reports")]);
    let refusals = [
        ("profile.folded", "is a symbolic link"),
        ("device.folded", "is a symbolic link"),
        ("pipe.folded", "is a FIFO"),
        ("theirs.folded", "belongs to uid 65534 in a shared sticky directory"),
        ("reports/out.folded", "reports is a symbolic link of uid 65534 in a shared sticky directory"),
    ];
    for (name, why) in refusals {
        let run = record_split(&[&shared.join(name)]);
        assert!(!run.status.success(), "{name} was written");
        let stderr = stderr(&run);
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with(&format!("profiler: error: cannot write {}", shared.join(name).display()))
        );
        assert!(stderr.contains(why), "{name}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(
        std::fs::read_dir(&root_dir).unwrap().count(),
        0,
        "nothing written through the linked directory"
    );
    assert_eq!(std::fs::metadata(shared.join("theirs.folded")).unwrap().len(), 0);
    // The planted things are all still there, as planted.
    for name in ["profile.folded", "device.folded", "reports"] {
        assert!(shared.join(name).is_symlink(), "{name}");
    }
    // Control: a name nobody planted in the same directory is written, root's and private.
    let fresh = shared.join("fresh.folded");
    let run = record_split(&[&fresh]);
    assert!(run.status.success(), "{}", stderr(&run));
    let folded = Folded::read(&fresh);
    assert!(folded.leaf_samples("hot_a", &[]).0 > 0, "the workload was profiled");
    let meta = std::fs::metadata(&fresh).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600));
    // Leftovers: no temporary file stays behind after a refusal.
    let names: Vec<String> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|name| !name.starts_with(".profiler-")), "{names:?}");
}

#[test]
fn outputs_are_private_and_go_to_the_sudo_user_only_in_their_directory() {
    if !e2e_enabled() {
        return;
    }
    let (scratch, shared) = shared_dir("private-outputs");
    let pprof = shared.join("cpu.pb.gz");
    // A command that spends its time in system calls, so that the profile holds kernel frames.
    let dd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=64", "count=2000000"];
    let run = run_bounded(&[&["record", "-F", "999", "-o", pprof.to_str().unwrap(), "--"][..], &dd].concat());
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(std::fs::metadata(&pprof).unwrap().mode() & 0o7777, 0o600);
    // Control: the profile holds kernel addresses, which nobody must not read.
    let raw =
        Command::new("go").args(["tool", "pprof", "-raw"]).arg(&pprof).output().expect("run go tool pprof");
    assert!(
        String::from_utf8_lossy(&raw.stdout).contains("[kernel.kallsyms]"),
        "kernel frames in the profile"
    );
    let read = as_nobody("cat").arg(&pprof).output().unwrap();
    assert!(!read.status.success(), "nobody read root's profile");
    assert!(String::from_utf8_lossy(&read.stderr).contains("Permission denied"));

    // Under sudo by nobody: in nobody's own directory the output is theirs, elsewhere root's.
    let theirs = scratch.join("nobodys");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    for (dir, owner) in [(&theirs, NOBODY), (&scratch, 0)] {
        let out = dir.join("sudo.folded");
        let run = profiler()
            .env("SUDO_UID", NOBODY.to_string())
            .env("SUDO_GID", NOBODY.to_string())
            .args(["record", "-F", "99", "-o", out.to_str().unwrap(), "--", "true"])
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", stderr(&run));
        let meta = std::fs::metadata(&out).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (owner, owner, 0o600),
            "{}",
            out.display()
        );
    }
}

#[test]
fn the_agent_removes_only_its_own_files() {
    if !e2e_enabled() {
        return;
    }
    let (scratch, shared) = shared_dir("planted-agent-dir");
    let victim = scratch.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    // Named as the agent names its files, with older times than any it will write.
    nobody("touch", &[&"-d", &"2001-01-01", &shared.join("planted-1000.pb.gz")]);
    nobody("ln", &[&"-s", &victim, &shared.join("planted-1001.pb.gz")]);
    let split = build_workload("split.c", "split-planted", "gcc", &["-O2", "-g"]);
    let workload = spawn(&split, &["0"]);
    let pid = workload.pid().to_string();
    let dir = shared.to_str().unwrap();
    let run = run_bounded(&[
        "agent",
        "--output-dir",
        dir,
        "--interval",
        "1",
        "-d",
        "4",
        "--keep",
        "1",
        "--service-name",
        "planted",
        "-p",
        &pid,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(shared.join("planted-1000.pb.gz").exists(), "nobody's file was removed");
    assert!(shared.join("planted-1001.pb.gz").is_symlink(), "the link was removed");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // Control: the agent wrote a file each window and kept only the newest of its own.
    let own: Vec<std::fs::Metadata> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|entry| entry.unwrap().path().symlink_metadata().unwrap())
        .filter(|meta| meta.uid() == 0)
        .collect();
    assert_eq!(own.len(), 1, "--keep 1");
    assert_eq!(own[0].mode() & 0o7777, 0o600);
    assert!(stderr(&run).lines().all(|line| !line.contains("warning")), "{}", stderr(&run));
}

/// Records the root JIT workload for two seconds, with its perf map made by `plant`: the folded
/// stacks and the profiler's stderr.
fn record_root_jit(test: &str, plant: impl FnOnce(&Path, &str)) -> (String, String) {
    let scratch = scratch_dir(test);
    let (jit, code) = root_jit();
    let map = PathBuf::from(format!("/tmp/perf-{}.map", jit.pid()));
    let _ = std::fs::remove_file(&map);
    plant(&map, &code);
    let out = scratch.join("out.folded");
    let pid = jit.pid().to_string();
    let run = run_bounded(&["record", "-p", &pid, "-F", "999", "-d", "2", "-o", out.to_str().unwrap()]);
    let _ = std::fs::remove_file(&map);
    assert!(run.status.success(), "{}", stderr(&run));
    (std::fs::read_to_string(&out).unwrap(), stderr(&run))
}

#[test]
fn a_perf_map_planted_for_a_root_process_is_not_read() {
    if !e2e_enabled() {
        return;
    }
    let secret = PathBuf::from(format!("/tmp/profiler-root-secret-{}", std::process::id()));
    let (folded, stderr) = record_root_jit("planted-root-perf-map", |map, code| {
        std::fs::write(&secret, format!("{code} leaked_root_secret\n")).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        nobody("ln", &[&"-s", &secret, &map]);
    });
    let _ = std::fs::remove_file(&secret);
    assert!(folded.contains("[unknown]"), "the JIT code was sampled:\n{folded}");
    assert!(!folded.contains("leaked_root_secret"), "{folded}");
    assert!(
        stderr.contains("was not read") && stderr.contains("a symbolic link, not a regular file"),
        "{stderr}"
    );

    // Root's own map, writable by a group: refused too.
    let (folded, stderr) = record_root_jit("group-writable-perf-map", |map, code| {
        std::fs::write(map, format!("{code} group_written\n")).unwrap();
        std::fs::set_permissions(map, std::fs::Permissions::from_mode(0o664)).unwrap();
    });
    assert!(!folded.contains("group_written"), "{folded}");
    assert!(stderr.contains("is writable by other users (mode 664)"), "{stderr}");

    // Control: the process's own map (root's, written by root only) names the code.
    let (folded, stderr) = record_root_jit("root-perf-map", |map, code| {
        std::fs::write(map, format!("{code} root_jit_code\n")).unwrap();
        std::fs::set_permissions(map, std::fs::Permissions::from_mode(0o644)).unwrap();
    });
    assert!(folded.contains("root_jit_code_[j]"), "{folded}");
    assert!(!stderr.contains("perf map"), "{stderr}");
}
