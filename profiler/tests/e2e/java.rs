//! End to end, as root: Java programs on every JDK installed under /usr/lib/jvm, their JIT frames
//! named from what the JVM tells external tools.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::common::*;

// Alone on the machine while a test runs JVMs: a JVM busy on both CPUs of the test machine
// beside another one spends seconds more compiling, and a share measured while its code is half
// interpreted, half compiled is the JIT's, not the program's.

/// Every JDK under /usr/lib/jvm (links to another one left out): its `bin` directory.
fn jdks() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/jvm")
        .expect("/usr/lib/jvm: the Java tests need the JDKs installed there")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let bin = entry.path().join("bin");
            let real = entry.file_type().ok()?.is_dir() && bin.join("javac").exists();
            real.then_some(bin)
        })
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no JDK with javac under /usr/lib/jvm");
    found
}

/// The workload `java/{source}` compiled for the oldest JDK here, in `dir` (with what is
/// compiled there already).
fn compile(jdks: &[PathBuf], dir: &Path, source: &str) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/java").join(source);
    let javac = jdks[0].join("javac");
    let mut command = Command::new(&javac);
    command.args(["--release", "17", "-cp"]).arg(dir).arg("-d").arg(dir).arg(&source);
    let status = command.status().unwrap();
    assert!(status.success(), "{} failed", javac.display());
}

/// The JVM's options for a perf map written at exit, with frame pointers kept in JIT code.
const PERF_MAP_AT_EXIT: [&str; 3] =
    ["-XX:+PreserveFramePointer", "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit"];

/// With frame pointers kept and the perf map written as the JVM exits, after its frames were
/// first named, the profiler names the share of samples `perf record -g` names from the same
/// map (perf reads it later, when its report is made), within 5 points (two runs).
#[test]
fn java_frames_named_from_a_perf_map_written_at_exit() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let jdks = jdks();
    let dir = scratch_dir("java-perf-map-at-exit");
    compile(&jdks, &dir, "Shares.java");
    for bin in &jdks {
        let java = bin.join("java");
        // Through a shell that notes its pid and execs the JVM: the maps left behind are known
        // by name, and no other file of /tmp is looked at.
        let pid_file = dir.join("jvm.pid");
        let mut command: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            r#"echo $$ > "$0" && exec "$@""#.into(),
            pid_file.display().to_string(),
            java.display().to_string(),
        ];
        command.extend(PERF_MAP_AT_EXIT.iter().map(|option| option.to_string()));
        command.extend(["-cp".into(), dir.display().to_string(), "Shares".into(), "3".into()]);
        let ours = {
            let out = dir.join("out.folded");
            let mut args = vec!["record", "-F", "499", "-o", out.to_str().unwrap(), "--"];
            args.extend(command.iter().map(String::as_str));
            let run = run_profiler(&args);
            remove_map_of(&pid_file);
            assert!(run.status.success());
            let folded = Folded::read(&out);
            let named: u64 = folded
                .stacks
                .iter()
                .filter(|(frames, _)| frames.iter().any(|frame| names_a_method(frame)))
                .map(|(_, n)| n)
                .sum();
            (named, folded.total())
        };
        let perf = perf_named(&dir, &command);
        remove_map_of(&pid_file);
        let share = |(named, total): (u64, u64)| named as f64 / total as f64;
        eprintln!("{}: profiler names {ours:?}, perf {perf:?}", java.display());
        assert!(perf.1 >= 500 && ours.1 >= 500, "both sampled the JVM for seconds");
        assert!(share(perf) >= 0.5, "perf names the program's methods from the map");
        assert!(
            share(ours) >= share(perf) - 0.05,
            "{}: the profiler names {:.1}% of samples, perf {:.1}%",
            java.display(),
            share(ours) * 100.0,
            share(perf) * 100.0
        );
    }
}

/// The three methods of Shares.java and their shares of its work.
const SHARES: [(&str, f64); 3] = [("Shares.alpha", 60.0), ("Shares.beta", 30.0), ("Shares.gamma", 10.0)];

/// With no options at all, on every JDK here, the JVM's Java frames are named from what HotSpot
/// exports for external tools: interpreted, compiled and inlined methods (alpha, beta and gamma
/// are inlined into main's compiled loop by default), each under `Shares.main` and the native
/// frames that started the JVM, with their shares of the work and their source lines, whether
/// the JVM is started by the profiler (its start-up included) or profiled once running.
#[test]
fn java_methods_named_with_no_options() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let jdks = jdks();
    let dir = scratch_dir("java-no-options");
    compile(&jdks, &dir, "Shares.java");
    let classes = dir.to_str().unwrap();
    for bin in &jdks {
        let java = bin.join("java");
        let java = java.to_str().unwrap();
        let folded = dir.join("out.folded");
        let pprof = dir.join("out.pb.gz");
        let outputs = ["-o", folded.to_str().unwrap(), "-o", pprof.to_str().unwrap()];
        let from_start = {
            let mut args = vec!["record", "--per-thread", "-F", "499"];
            args.extend(outputs);
            args.extend(["--", java, "-cp", classes, "Shares", "6"]);
            assert!(run_profiler(&args).status.success());
            Folded::read(&folded)
        };
        assert_java_named(&from_start, &format!("{java} (started by the profiler)"));
        assert_pprof_lines(&pprof, java);
        let running = {
            let jvm = spawn(Path::new(java), &["-cp", classes, "Shares", "30"]);
            wait_for_cpu(jvm.pid(), std::time::Duration::from_secs(2));
            let pid = jvm.pid().to_string();
            let mut args = vec!["record", "--per-thread", "-F", "499", "-d", "5", "-p", &pid];
            args.extend(outputs);
            assert!(run_profiler(&args).status.success());
            let named = Folded::read(&folded);
            // And with --native-only, none of its frames are Java's.
            let args = [
                "record",
                "-F",
                "199",
                "-d",
                "1",
                "--native-only",
                "-p",
                &pid,
                "-o",
                folded.to_str().unwrap(),
            ];
            assert!(run_profiler(&args).status.success());
            let native = Folded::read(&folded);
            assert!(
                native.total() > 0
                    && !native.stacks.iter().flat_map(|(f, _)| f).any(|f| f.contains("Shares."))
            );
            named
        };
        assert_java_named(&running, &format!("{java} (running)"));
    }
}

/// A JVM that loaded 300 native libraries once running (`System.load`, each a file of its own):
/// they lie below `libjvm.so` and come before it in its maps. Profiled once running, on the
/// oldest JDK here, its Java frames are named as any JVM's.
#[test]
fn a_jvm_that_loaded_hundreds_of_native_libraries() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let jdks = jdks();
    let dir = scratch_dir("java-many-libraries");
    compile(&jdks, &dir, "Shares.java");
    compile(&jdks, &dir, "ManyLibraries.java");
    let libraries = dir.join("libraries");
    std::fs::create_dir(&libraries).unwrap();
    let plugin = build_workload("plugin.c", "libplugin.so", "gcc", &["-O2", "-shared", "-fPIC"]);
    for n in 0..300 {
        std::fs::copy(&plugin, libraries.join(format!("libplugin-{n:03}.so"))).unwrap();
    }
    let java = jdks[0].join("java");
    let mut child = Command::new(&java)
        .arg("-cp")
        .arg(&dir)
        .arg("ManyLibraries")
        .arg(&libraries)
        .arg("30")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let jvm = KillOnDrop(child);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", jvm.pid())).unwrap();
    let libraries = |lines: &mut dyn Iterator<Item = &str>| {
        lines.filter(|line| line.contains(" r-xp ") && line.contains("/libplugin-")).count()
    };
    let libjvm = |line: &str| line.ends_with("/libjvm.so");
    assert!(maps.lines().any(libjvm), "libjvm.so is mapped");
    let (all, before) =
        (libraries(&mut maps.lines()), libraries(&mut maps.lines().take_while(|line| !libjvm(line))));
    assert!(
        all >= 300 && before >= 250,
        "{all} libraries mapped, {before} of them before libjvm.so in its maps"
    );
    wait_for_cpu(jvm.pid(), std::time::Duration::from_secs(2));
    let folded = dir.join("out.folded");
    let pid = jvm.pid().to_string();
    let args = ["record", "--per-thread", "-F", "499", "-d", "5", "-p", &pid, "-o", folded.to_str().unwrap()];
    assert!(run_profiler(&args).status.success());
    assert_java_named(&Folded::read(&folded), &format!("{} (300 libraries loaded)", java.display()));
}

/// Fails unless at least 90% of the samples of the JVM's busiest Java thread (`java-TID`, the
/// one running `main`; recorded at 499 Hz, so that ± 5 points is over five sampling errors on its
/// ~2,500 samples) name one of the three methods, with their shares ± 5 points, under
/// `Shares.main` and the JVM's native start (`JavaMain`, reached from the thread's start).
fn assert_java_named(folded: &Folded, what: &str) {
    let roots = folded.roots();
    let (root, &total) = roots
        .iter()
        .filter(|(root, _)| root.starts_with("java-"))
        .max_by_key(|(_, n)| **n)
        .unwrap_or_else(|| panic!("{what}: no java thread"));
    assert!(total >= 500, "{what}: {total} samples of {root}");
    let stacks: Vec<&Vec<String>> =
        folded.stacks.iter().filter(|(f, _)| &f[0] == root).map(|(f, _)| f).collect();
    let count = |test: &dyn Fn(&[String]) -> bool| -> u64 {
        folded.stacks.iter().filter(|(f, _)| &f[0] == root && test(f)).map(|(_, n)| n).sum()
    };
    let method = |frame: &str, name: &str| {
        frame.strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with("_["))
    };
    let named = count(&|f| f.iter().any(|frame| SHARES.iter().any(|(name, _)| method(frame, name))));
    let share = 100.0 * named as f64 / total as f64;
    eprintln!("{what}: {named} of {total} samples of {root} name a method of Shares ({share:.1}%)");
    assert!(share >= 90.0, "{what}: {share:.1}% of the samples name alpha, beta or gamma");
    for (name, expected) in SHARES {
        let samples = count(&|f| f.iter().any(|frame| method(frame, name)));
        let measured = 100.0 * samples as f64 / named as f64;
        eprintln!("{what}: {name} {measured:.1}%");
        assert!(
            (measured - expected).abs() <= 5.0,
            "{what}: {name} has {measured:.1}%, expected {expected} ± 5"
        );
    }
    let complete = count(&|f| {
        let at = |name: &str| f.iter().position(|frame| method(frame, name));
        let work = SHARES.iter().find_map(|(name, _)| at(name));
        let (Some(start), Some(java_main), Some(main), Some(work)) =
            (at("start_thread"), at("JavaMain"), at("Shares.main"), work)
        else {
            return false;
        };
        start < java_main && java_main < main && main < work
    });
    assert!(
        complete as f64 >= 0.97 * named as f64,
        "{what}: {complete} of {named} stacks run from start_thread through JavaMain and Shares.main: {stacks:#?}",
        stacks = &stacks[..stacks.len().min(5)]
    );
}

/// Java calling C through JNI calling Java again, with no options, on every JDK here: one
/// stack from the thread's start through the JVM's native frames, the Java caller, the native
/// method, the C code, and back through the JVM into the Java it called (overloaded, so named
/// with its signature).
#[test]
fn java_native_and_java_again_in_one_stack() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let jdks = jdks();
    let dir = scratch_dir("java-mixed");
    compile(&jdks, &dir, "Mixed.java");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads");
    let include = jdks[0].parent().unwrap().join("include");
    let library = dir.join("libmixed.so");
    let status = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-g"])
        .arg(format!("-I{}", include.display()))
        .arg(format!("-I{}", include.join("linux").display()))
        .arg("-o")
        .arg(&library)
        .arg(source.join("mixed_jni.c"))
        .status()
        .unwrap();
    assert!(status.success(), "gcc failed");
    for bin in &jdks {
        let java = bin.join("java");
        let out = dir.join("out.folded");
        let args = ["record", "--per-thread", "-F", "499", "-o", out.to_str().unwrap(), "--"];
        let mut args: Vec<&str> = args.to_vec();
        args.extend([java.to_str().unwrap(), "-cp", dir.to_str().unwrap(), "Mixed", "4"]);
        args.push(library.to_str().unwrap());
        assert!(run_profiler(&args).status.success());
        let folded = Folded::read(&out);
        let roots = folded.roots();
        let (root, &total) =
            roots.iter().filter(|(root, _)| root.starts_with("java-")).max_by_key(|(_, n)| **n).unwrap();
        let what = java.display();
        let with = |leaf: &str, chain: &[&str]| -> (u64, u64) {
            let stacks = folded.stacks.iter().filter(|(f, _)| &f[0] == root);
            let leaves: Vec<_> = stacks.filter(|(f, _)| f.last().is_some_and(|l| is(l, leaf))).collect();
            let all = leaves.iter().map(|(_, n)| n).sum();
            let complete = leaves.iter().filter(|(f, _)| in_order(f, chain)).map(|(_, n)| n).sum();
            (all, complete)
        };
        let native = ["start_thread", "JavaMain", "Mixed.main", "Mixed.viaNative", "Mixed.nativeSpin"];
        let in_c = [&native[..], &["Java_Mixed_nativeSpin", "c_spin"]].concat();
        let back_in_java =
            [&native[..], &["Java_Mixed_nativeSpin", "JavaCalls::call_helper", "Mixed.callback(J)J"]]
                .concat();
        for (leaf, chain) in [("c_spin", &in_c), ("Mixed.callback(J)J", &back_in_java)] {
            let (all, complete) = with(leaf, chain);
            eprintln!("{what}: {leaf}: {all} of {total} samples, {complete} through {chain:?}");
            assert!(all * 5 >= total, "{what}: {all} of {total} samples in {leaf}");
            assert!(
                complete as f64 >= 0.97 * all as f64,
                "{what}: {complete} of {all} {leaf} stacks through {chain:?}"
            );
        }
    }
}

/// With `--off-cpu`, a Java thread's waits are under the Java methods that waited, through the
/// JDK's `Thread.sleep` (overloaded, so with its signature) and the JVM's native code
/// (`JVM_Sleep`, `JVM_SleepNanos` in 25) into the kernel, on every JDK here.
#[test]
fn java_waits_under_the_methods_that_waited() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let jdks = jdks();
    let dir = scratch_dir("java-off-cpu");
    compile(&jdks, &dir, "Sleeper.java");
    for bin in &jdks {
        let java = bin.join("java");
        let out = dir.join("out.folded");
        let args = ["record", "--off-cpu", "--per-thread", "-o", out.to_str().unwrap(), "--"];
        let mut args: Vec<&str> = args.to_vec();
        args.extend([java.to_str().unwrap(), "-cp", dir.to_str().unwrap(), "Sleeper", "4"]);
        assert!(run_profiler(&args).status.success());
        let folded = Folded::read(&out);
        // The thread running main: the one whose stacks name Sleeper.
        let root = &folded
            .stacks
            .iter()
            .find(|(f, _)| f.iter().any(|frame| frame.starts_with("Sleeper.")))
            .unwrap()
            .0[0];
        let stacks = || folded.stacks.iter().filter(|(f, _)| &f[0] == root);
        let total: u64 = stacks().map(|(_, n)| n).sum();
        let chain = [
            "JavaMain",
            "Sleeper.main",
            "Sleeper.waitHere",
            "Sleeper.nap",
            "java.lang.Thread.sleep(J)V",
            "___pthread_cond_timedwait",
            "__schedule",
        ];
        let waiting: u64 = stacks().filter(|(f, _)| in_order(f, &chain)).map(|(_, n)| n).sum();
        eprintln!("{}: {waiting} of {total} µs off the CPU through {chain:?}", java.display());
        assert!(
            waiting as f64 >= 0.9 * total as f64,
            "{}: {waiting} of {total} µs through {chain:?}",
            java.display()
        );
    }
}

/// Whether `frame` is (a frame of) the function `name`: the name alone, or with a kind suffix
/// (`_[j]`) or parameters.
fn is(frame: &str, name: &str) -> bool {
    frame
        .strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("_[") || rest.starts_with('('))
}

/// Whether `frames` (outermost first) hold frames of `names` in that order.
fn in_order(frames: &[String], names: &[&str]) -> bool {
    let mut frames = frames.iter();
    names.iter().all(|name| frames.any(|frame| is(frame, name)))
}

/// A compiled recursion 1000 frames deep is stepped whole, to `Deep.main`, on every JDK here:
/// its frames share one nmethod, read once a stack, so stepping them leaves the sample's reads
/// to naming.
#[test]
fn deep_compiled_recursion_whole_to_main() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let jdks = jdks();
    let dir = scratch_dir("java-deep");
    compile(&jdks, &dir, "Deep.java");
    const DEPTH: usize = 1000;
    let depth = DEPTH.to_string();
    for bin in &jdks {
        let java = bin.join("java");
        let out = dir.join("out.folded");
        let args = ["record", "-F", "199", "-o", out.to_str().unwrap(), "--"];
        let mut args: Vec<&str> = args.to_vec();
        args.extend([java.to_str().unwrap(), "-cp", dir.to_str().unwrap(), "Deep", "6", &depth]);
        let run = run_profiler(&args);
        assert!(run.status.success());
        let folded = Folded::read(&out);
        let count = |test: &dyn Fn(&[String]) -> bool| -> u64 {
            folded.stacks.iter().filter(|(frames, _)| test(frames)).map(|(_, n)| n).sum()
        };
        let deep = |frames: &[String]| frames.iter().filter(|frame| is(frame, "Deep.down")).count() > DEPTH;
        let in_down = count(&|frames| frames.last().is_some_and(|leaf| is(leaf, "Deep.down")));
        let whole = count(&|frames| deep(frames) && in_order(frames, &["Deep.main", "Deep.down"]));
        eprintln!("{}: {whole} of {in_down} samples in Deep.down whole to main", java.display());
        assert!(in_down >= 200, "{}: {in_down} samples in Deep.down", java.display());
        assert!(
            whole as f64 >= 0.9 * in_down as f64,
            "{}: {whole} of {in_down} samples in Deep.down hold its {} frames under Deep.main",
            java.display(),
            DEPTH + 1
        );
    }
}

/// With only the interpreter (`-Xint`), the innermost interpreted frame is at the line it runs,
/// from the bytecode pointer the interpreter keeps in a register (its frame's slot is only
/// written at calls: it would put every sample of `Shares.spin` at its first line).
#[test]
fn interpreted_frames_at_the_line_they_run() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let jdks = jdks();
    let dir = scratch_dir("java-interpreted-lines");
    compile(&jdks, &dir, "Shares.java");
    for bin in &jdks {
        let java = bin.join("java");
        let pprof = dir.join("out.pb.gz");
        let args = ["record", "-F", "499", "-o", pprof.to_str().unwrap(), "--", java.to_str().unwrap()];
        let mut args: Vec<&str> = args.to_vec();
        args.extend(["-Xint", "-cp", dir.to_str().unwrap(), "Shares", "3"]);
        assert!(run_profiler(&args).status.success());
        let profile = read_pprof(&pprof);
        let string = |index: i64| profile.string_table[index as usize].as_str();
        let (mut in_spin, mut in_loop) = (0, 0);
        let loop_lines = spin_loop_lines();
        for sample in &profile.sample {
            let leaf = &profile.location[sample.location_id[0] as usize - 1];
            let Some(line) = leaf.line.first() else { continue };
            if string(profile.function[line.function_id as usize - 1].name) == "Shares.spin" {
                in_spin += sample.value[0];
                in_loop += if loop_lines.contains(&line.line) { sample.value[0] } else { 0 };
            }
        }
        eprintln!("{}: {in_loop} of {in_spin} of Shares.spin's samples at {loop_lines:?}", java.display());
        assert!(
            in_spin > 0 && in_loop as f64 >= 0.9 * in_spin as f64,
            "{}: {in_loop} of {in_spin}",
            java.display()
        );
    }
}

/// The lines of `Shares.spin`'s loop in Shares.java: the `for` and the line in it.
fn spin_loop_lines() -> std::ops::RangeInclusive<i64> {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/java/Shares.java"),
    );
    let body =
        source.unwrap().lines().position(|line| line.contains("total += i * i % 7")).unwrap() as i64 + 1;
    body - 1..=body
}

/// Fails unless the pprof profile at `path` has `Shares.spin` at a line of its loop in
/// Shares.java (the `for` and the line in it).
fn assert_pprof_lines(path: &Path, what: &str) {
    let profile = read_pprof(path);
    let string = |index: i64| profile.string_table[index as usize].as_str();
    let loop_lines = spin_loop_lines();
    let found = profile.location.iter().flat_map(|location| &location.line).any(|line| {
        let function = &profile.function[line.function_id as usize - 1];
        string(function.name) == "Shares.spin"
            && string(function.filename) == "Shares.java"
            && loop_lines.contains(&line.line)
    });
    assert!(found, "{what}: pprof has no Shares.spin at Shares.java:{loop_lines:?}");
}

/// Whether a frame names a method of the workload (`void Shares.alpha()` in the JVM's map).
fn names_a_method(frame: &str) -> bool {
    frame.contains("Shares.")
}

/// The samples of `perf record -g -F 499 -- COMMAND` naming a method of the workload, and all.
fn perf_named(dir: &Path, command: &[String]) -> (u64, u64) {
    let data = dir.join("perf.data");
    let status = Command::new("perf")
        .args(["record", "-q", "-g", "-F", "499", "-o"])
        .arg(&data)
        .arg("--")
        .args(command)
        .status()
        .expect("perf, to compare with");
    assert!(status.success());
    let script = Command::new("perf").args(["script", "-i"]).arg(&data).output().unwrap();
    assert!(script.status.success());
    // A sample is a header line, its frames indented, and a blank line.
    let (mut named, mut total) = (0, 0);
    for sample in String::from_utf8_lossy(&script.stdout).split("\n\n").filter(|s| !s.trim().is_empty()) {
        total += 1;
        if sample.lines().skip(1).any(names_a_method) {
            named += 1;
        }
    }
    (named, total)
}

/// The JVM leaves its map behind: the one of the JVM whose pid `pid_file` holds is removed, if
/// it is the JVM's (a regular file of root's; a link or anything else another user put at that
/// name is left alone, never followed or read).
fn remove_map_of(pid_file: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    let pid = std::fs::read_to_string(pid_file).expect("the JVM's pid");
    let map = PathBuf::from(format!("/tmp/perf-{}.map", pid.trim()));
    if std::fs::symlink_metadata(&map).is_ok_and(|meta| meta.file_type().is_file() && meta.uid() == 0) {
        let _ = std::fs::remove_file(&map);
    }
}

/// With no options at all, `profiler check -p` reads the tables HotSpot exports for external
/// tools from the live JVM (their field offsets exist only in the process) and finds its code
/// cache: the JIT's executable anonymous memory lies within the bounds it reports.
#[test]
fn check_reads_the_tables_hotspot_exports_for_external_tools() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let jdks = jdks();
    let dir = scratch_dir("java-check");
    compile(&jdks, &dir, "Shares.java");
    for bin in &jdks {
        let java = spawn(&bin.join("java"), &["-cp", dir.to_str().unwrap(), "Shares", "30"]);
        // Running Java code, compiled by now.
        wait_for_cpu(java.pid(), std::time::Duration::from_secs(2));
        let out = run_bounded(&["check", "-p", &java.pid().to_string()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().find(|l| l.contains("HotSpot JVM")).unwrap_or_else(|| panic!("{stdout}"));
        assert!(line.starts_with("OK"), "{}: {line}", bin.display());
        let count = |what: &str| -> u64 {
            let head = &line[..line.find(what).unwrap_or_else(|| panic!("{line}"))];
            head.trim_end().rsplit(' ').next().unwrap().parse().unwrap()
        };
        // JDK 17 exports 788 fields and 768 types, JDK 25 585 and 335.
        assert!(count(" fields") >= 400 && count(" types") >= 300, "{line}");
        let bounds = line.rsplit("code cache ").next().unwrap();
        let (low, high) = bounds.split_once('-').unwrap();
        let hex = |text: &str| u64::from_str_radix(text.trim().trim_start_matches("0x"), 16).unwrap();
        let code_cache = hex(low)..hex(high);
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", java.pid())).unwrap();
        let jit: Vec<&str> = maps
            .lines()
            .filter(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                fields.len() == 5 && fields[1].contains('x')
            })
            .filter(|l| {
                let (start, end) = l.split_whitespace().next().unwrap().split_once('-').unwrap();
                code_cache.contains(&hex(start)) && hex(end) <= code_cache.end
            })
            .collect();
        assert!(
            !jit.is_empty(),
            "{}: no executable anonymous memory in {code_cache:x?}:\n{maps}",
            bin.display()
        );
    }
}
