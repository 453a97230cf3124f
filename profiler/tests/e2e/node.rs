//! End to end, as root: Node programs, their JavaScript frames named from V8's own metadata
//! (no flags), and from V8's perf map or jitdump (with flags).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::common::*;

// Alone on the machine while a test runs Node: two beside each other on the test machine's two
// CPUs leave each too little to sample.

/// With `--perf-basic-prof --interpreted-frames-native-stack`, V8 writes a perf map as it
/// compiles and gives interpreted functions frames of their own: every JavaScript function is
/// named, and each gets its share. (With `--native-only`: V8's own metadata would name them
/// first.)
#[test]
fn javascript_functions_named_from_the_perf_map_get_their_shares() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/node/shares.js");
    let dir = scratch_dir("node-perf-map");
    // With a perf map V8 also writes a log, by default in the working directory.
    let log = format!("--logfile={}", dir.join("v8.log").display());
    let folded = record_command(
        &dir,
        &["--per-thread", "--native-only"],
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
/// shares (with `--native-only`, as above).
#[test]
fn javascript_functions_named_from_the_jitdump_get_their_shares() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/node/shares.js");
    let dir = scratch_dir("node-jitdump");
    let out = dir.join("out.folded");
    let started = std::time::SystemTime::now();
    let run = profiler()
        .current_dir(&dir)
        .args([
            "record",
            "-F",
            "999",
            "--per-thread",
            "--native-only",
            "-o",
            out.to_str().unwrap(),
            "--",
            "node",
        ])
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
    // A map of that pid may be left from an earlier process: not written by this one.
    let perf_map = std::fs::metadata(format!("/tmp/perf-{pid}.map"));
    assert!(!perf_map.is_ok_and(|map| map.modified().unwrap() >= started), "and no perf map");
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
    assert_shares_of_the_work(&format!("PID {pid}"), named);
}

/// The Node majors `cargo xtask setup` installs under `.tools/node/VERSION/bin/node`.
const NODE_MAJORS: [u32; 5] = [18, 20, 22, 24, 26];

/// Every Node installed by setup: its version and binary. Fails when one is missing.
fn nodes() -> Vec<(String, PathBuf)> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/node");
    let installed: Vec<(String, PathBuf)> = std::fs::read_dir(&tools)
        .unwrap_or_else(|e| panic!("{}: {e} (run cargo xtask setup)", tools.display()))
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let node = entry.path().join("bin/node");
            node.exists().then(|| (entry.file_name().to_string_lossy().into_owned(), node))
        })
        .collect();
    NODE_MAJORS
        .iter()
        .map(|major| {
            installed
                .iter()
                .find(|(version, _)| version.split('.').next() == Some(&major.to_string()))
                .cloned()
                .unwrap_or_else(|| {
                    panic!("Node {major} is not under {} (run cargo xtask setup)", tools.display())
                })
        })
        .collect()
}

/// The three functions of shares.js, as the profiler names them with no flags:
/// `NAME (FILE:LINE:COLUMN)` with the line and column of their start, as V8's perf map says them.
const NO_FLAG_NAMES: [&str; 3] = ["alpha (", "beta (", "gamma ("];
const NO_FLAG_LINES: [&str; 3] = ["shares.js:6:15)", "shares.js:61:14)", "shares.js:116:15)"];

/// With no flags, on every Node installed by setup, started by the profiler and attached to once
/// running: at least 95% of the main thread's samples (90% when started by the profiler: node's
/// own start-up, a tenth of a second of CPU or more on a busy machine, is in them) name alpha,
/// beta or gamma of shares.js with their file and start line, with their shares ± 5 points, on
/// stacks whole from the process's start through node's C++ (`node::Start`) and the script's
/// top level (95% of them); and with `--native-only`, none names JavaScript.
#[test]
fn javascript_functions_named_with_no_flags() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/node/shares.js");
    let script = script.to_str().unwrap();
    let dir = scratch_dir("node-no-flags");
    let out = dir.join("out.folded");
    for (version, node) in nodes() {
        let node = node.to_str().unwrap();
        let started = record_node(&out, &["-F", "499"], Path::new(node), Path::new(script), &["6"]);
        let pid = busiest_node_thread(&started);
        assert_named_with_no_flags(&started, pid, 0.90, &format!("Node {version} (started by the profiler)"));
        let running = spawn(Path::new(node), &[script, "30"]);
        wait_for_cpu(running.pid(), Duration::from_secs(1));
        let pid = running.pid().to_string();
        let args =
            ["record", "--per-thread", "-F", "499", "-d", "4", "-p", &pid, "-o", out.to_str().unwrap()];
        assert!(run_profiler(&args).status.success());
        let attached = Folded::read(&out);
        assert_named_with_no_flags(&attached, running.pid(), 0.95, &format!("Node {version} (running)"));
        let args =
            ["record", "-F", "199", "-d", "1", "--native-only", "-p", &pid, "-o", out.to_str().unwrap()];
        assert!(run_profiler(&args).status.success());
        let native = Folded::read(&out);
        assert!(native.total() > 0, "Node {version}: sampled with --native-only");
        assert!(
            !native.stacks.iter().flat_map(|(frames, _)| frames).any(|frame| frame.contains("shares.js")),
            "Node {version}: --native-only names no JavaScript"
        );
    }
}

/// With no flags, the profiler names at least as many of the main thread's samples (within a
/// point) as V8's perf map does (`--perf-basic-prof --interpreted-frames-native-stack`, recorded
/// with `--native-only` so that the map alone names them), on the Node installed on the system.
#[test]
fn no_flags_name_as_many_samples_as_the_perf_map() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/node/shares.js");
    let dir = scratch_dir("node-no-flags-vs-perf-map");
    // Node's start-up (OpenSSL's certificates, V8's snapshot) is unnamed either way, and the
    // first run on a fresh machine pays its files' page faults too: about 1% more of a 5 s
    // run, which the comparison would count against whichever run comes first.
    let warm = std::process::Command::new("node").args(["-e", "0"]).status().expect("run node");
    assert!(warm.success(), "node -e 0: {warm}");
    let no_flags =
        record_command(&dir, &["--per-thread"], Path::new("node"), &[script.to_str().unwrap(), "5"]);
    let pid = busiest_node_thread(&no_flags);
    let ours = named_share(&no_flags, pid, &|frame| NO_FLAG_NAMES.iter().any(|name| frame.starts_with(name)));
    let log = format!("--logfile={}", dir.join("v8.log").display());
    let flags = [
        "--perf-basic-prof",
        "--interpreted-frames-native-stack",
        &log,
        "--no-logfile-per-isolate",
        script.to_str().unwrap(),
        "5",
    ];
    let perf_map = record_command(&dir, &["--per-thread", "--native-only"], Path::new("node"), &flags);
    let pid = javascript_pid(&perf_map);
    std::fs::remove_file(format!("/tmp/perf-{pid}.map")).expect("node left its map");
    let theirs = named_share(&perf_map, pid, &|frame| {
        frame.strip_prefix("JS:").is_some_and(|name| {
            let name = name.trim_start_matches(['*', '^', '~']);
            ["alpha ", "beta ", "gamma "].iter().any(|function| name.starts_with(function))
        })
    });
    // Each function is named where the perf map says it starts: the same file, line and column.
    for function in ["alpha", "beta", "gamma"] {
        let ours =
            places(&no_flags, |frame| frame.strip_prefix(function)?.strip_prefix(" (")?.strip_suffix(')'));
        let theirs = places(&perf_map, |frame| {
            frame
                .strip_prefix("JS:")?
                .strip_suffix("_[j]")?
                .trim_start_matches(['*', '^', '~'])
                .strip_prefix(function)?
                .strip_prefix(' ')
        });
        assert!(
            ours.len() == 1 && ours == theirs,
            "{function}: at {ours:?} with no flags, {theirs:?} with the perf map"
        );
    }
    eprintln!("named: {:.1}% with no flags, {:.1}% with the perf map", 100.0 * ours, 100.0 * theirs);
    assert!(
        ours >= theirs - 0.01,
        "{:.1}% named with no flags, {:.1}% with the perf map",
        100.0 * ours,
        100.0 * theirs
    );
}

/// The places (`FILE:LINE:COLUMN`) that `place` finds in frames of `folded`.
fn places<'a>(folded: &'a Folded, place: impl Fn(&'a str) -> Option<&'a str>) -> BTreeSet<&'a str> {
    folded.stacks.iter().flat_map(|(frames, _)| frames).filter_map(|frame| place(frame)).collect()
}

/// The busiest thread (node's main one, running the script; `MainThread` from Node 24).
fn busiest_node_thread(folded: &Folded) -> u32 {
    let roots = folded.roots();
    let (root, _) = roots.iter().max_by_key(|(_, n)| **n).unwrap();
    root.rsplit_once('-').unwrap().1.parse().unwrap()
}

/// The share of the samples of thread `tid` with a frame that `names` one of the three.
fn named_share(folded: &Folded, tid: u32, names: &dyn Fn(&str) -> bool) -> f64 {
    let stacks = thread_stacks(folded, tid);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let named: u64 =
        stacks.iter().filter(|(frames, _)| frames.iter().any(|frame| names(frame))).map(|(_, n)| n).sum();
    assert!(total >= 500, "{total} samples of thread {tid}");
    named as f64 / total as f64
}

/// Fails unless at least `least` of the samples of thread `tid` name alpha, beta or gamma (their
/// start lines too), with their shares ± 5 points, and 95% of them are whole: from `_start`
/// through `node::Start` and the script's top level.
fn assert_named_with_no_flags(folded: &Folded, tid: u32, least: f64, what: &str) {
    let stacks = thread_stacks(folded, tid);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    assert!(total >= 500, "{what}: {total} samples of the main thread");
    let mut named = [0u64; 3];
    let mut whole = 0;
    for (frames, count) in &stacks {
        let innermost = frames.iter().rev().find_map(|frame| {
            let function = NO_FLAG_NAMES.iter().position(|name| frame.starts_with(name))?;
            assert!(frame.ends_with(NO_FLAG_LINES[function]), "{what}: {frame} is named with its start");
            Some(function)
        });
        if let Some(function) = innermost {
            named[function] += count;
            let started = frames.first().is_some_and(|frame| frame == "_start")
                && frames.iter().any(|frame| frame.starts_with("node::Start("))
                && frames
                    .iter()
                    .any(|frame| frame.starts_with("(anonymous) (") && frame.ends_with("shares.js:1:1)"));
            if started {
                whole += count;
            }
        }
    }
    let all: u64 = named.iter().sum();
    eprintln!("{what}: alpha, beta, gamma {named:?} of {total} samples of the main thread, {whole} whole");
    assert!(all as f64 >= least * total as f64, "{what}: {all} of {total} samples named");
    assert!(whole as f64 >= 0.95 * all as f64, "{what}: {whole} of {all} named samples whole");
    assert_shares_of_the_work(what, named);
}

/// Fails unless alpha, beta and gamma have the 60, 30 and 10% of the work (± 5 points) of
/// `named`, their samples.
fn assert_shares_of_the_work(what: &str, named: [u64; 3]) {
    let all: u64 = named.iter().sum();
    for (function, (samples, expected)) in
        ["alpha", "beta", "gamma"].iter().zip(named.iter().zip([60.0, 30.0, 10.0]))
    {
        let share = *samples as f64 * 100.0 / all as f64;
        assert!(
            (share - expected).abs() <= 5.0,
            "{what}: {function}: {share:.1}% of the named samples, not {expected}%"
        );
    }
}

/// `profiler record --per-thread [extra] -o OUT -- NODE SCRIPT [args]`: its folded stacks.
fn record_node(out: &Path, extra: &[&str], node: &Path, script: &Path, args: &[&str]) -> Folded {
    let mut argv = vec!["record", "--per-thread"];
    argv.extend(extra);
    argv.extend(["-o", out.to_str().unwrap(), "--", node.to_str().unwrap(), script.to_str().unwrap()]);
    argv.extend(args);
    assert!(run_profiler(&argv).status.success());
    Folded::read(out)
}

/// `tests/workloads/node/NAME`.
fn node_workload(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/node").join(name)
}

/// A JavaScript frame of the script called `file` (`NAME (/dir/FILE:LINE:COLUMN)`): its
/// function's name, line and column.
fn script_frame<'a>(frame: &'a str, file: &str) -> Option<(&'a str, u32, u32)> {
    let (name, place) = frame.strip_suffix(')')?.rsplit_once(" (")?;
    let (place, column) = place.rsplit_once(':')?;
    let (path, line) = place.rsplit_once(':')?;
    let in_file = path.strip_suffix(file)?.ends_with('/');
    in_file.then_some((name, line.parse().ok()?, column.parse().ok()?))
}

/// The `NAME (FILE:LINE:COLUMN)` frames of a script's functions, in the script's order: each of
/// `functions` where it starts (`function NAME(` or `async function NAME(`: V8 and its perf map
/// say the column of its parameter list), and the script's top level, `(anonymous)` at 1:1.
fn script_functions(script: &Path, functions: &[&str]) -> Vec<(String, u32, u32)> {
    let source = std::fs::read_to_string(script).unwrap();
    let mut named = vec![("(anonymous)".to_owned(), 1, 1)];
    for function in functions {
        let header = format!("function {function}(");
        let (line, column) = source
            .lines()
            .enumerate()
            .find_map(|(line, text)| {
                let at = text.find(&header).filter(|&at| text[..at].trim_end_matches("async ").is_empty())?;
                Some((line as u32 + 1, (at + header.len()) as u32))
            })
            .unwrap_or_else(|| panic!("no function {function} in {}", script.display()));
        named.push((function.to_string(), line, column));
    }
    named
}

/// Whether `frames` (root first) hold, in this order though not next to each other, a frame
/// passing each of `steps`.
fn in_order(frames: &[String], steps: &[&dyn Fn(&str) -> bool]) -> bool {
    let mut frames = frames.iter();
    steps.iter().all(|step| frames.any(|frame| step(frame)))
}

/// The script's frames of a stack (root first): their functions' names, lines and columns.
fn script_frames<'a>(frames: &'a [String], file: &str) -> Vec<(&'a str, u32, u32)> {
    frames.iter().filter_map(|frame| script_frame(frame, file)).collect()
}

/// Whether `named` (a stack's script frames, root first) are frames of `call_path`, in its order.
/// Some may be missing: a function first seen by a sample read after its process was gone names
/// no frame (its native frame stays), but none is off the path or out of order.
fn along(call_path: &[(&str, u32, u32)], named: &[(&str, u32, u32)]) -> bool {
    let mut path = call_path.iter();
    named.iter().all(|frame| path.any(|step| step == frame))
}

/// The summed weight of the stacks that `keep` keeps.
fn weight_of(stacks: &[(&[String], u64)], keep: impl Fn(&[String]) -> bool) -> u64 {
    stacks.iter().filter(|(frames, _)| keep(frames)).map(|(_, n)| n).sum()
}

/// Fails unless `kept` is at least `fraction` of `all`, showing a few of the stacks of `stacks`
/// that `keep` does not keep.
fn assert_share(
    what: &str,
    stacks: &[(&[String], u64)],
    fraction: f64,
    keep: impl Fn(&[String]) -> bool,
    of: impl Fn(&[String]) -> bool,
) {
    let all = weight_of(stacks, &of);
    let kept = weight_of(stacks, |frames| of(frames) && keep(frames));
    eprintln!("{what}: {kept} of {all}");
    let others: Vec<String> = stacks
        .iter()
        .filter(|(frames, _)| of(frames) && !keep(frames))
        .take(3)
        .map(|(frames, n)| format!("{n} {}", frames.join(";")))
        .collect();
    assert!(all > 0, "{what}: none at all");
    assert!(
        kept as f64 >= fraction * all as f64,
        "{what}: only {kept} of {all} ({:.1}%); some others:\n{}",
        100.0 * kept as f64 / all as f64,
        others.join("\n")
    );
}

/// The native addon of `addon.c`, built with the headers of the Node at `node`
/// (`bin/../include/node`) into `dir`.
fn build_addon(node: &Path, dir: &Path) -> PathBuf {
    let include = node.parent().unwrap().join("../include/node");
    assert!(include.join("node_api.h").exists(), "no node_api.h in {}", include.display());
    let out = dir.join("addon.node");
    let status = std::process::Command::new("gcc")
        .args(["-O2", "-g", "-shared", "-fPIC"])
        .arg("-I")
        .arg(&include)
        .arg(node_workload("addon.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run gcc");
    assert!(status.success(), "building addon.c failed");
    out
}

/// A native addon calling back into JavaScript, on every Node installed by setup, with no
/// flags: at least 80% of the main thread's samples are in `work` (node's own start-up is in the
/// rest), and 95% of those carry the whole chain, root first: `_start`, `node::Start`, the
/// script's top level, `drive` (the JavaScript that called the addon), V8's API call and N-API's
/// callback wrapper (`v8impl::...`), the addon's C function `call_many` (named from the addon's
/// symbols), `napi_call_function` and V8's `Execution::Call` (through `v8::Function::Call` or,
/// from Node 22, `v8::Object::CallAsFunction`), `Builtins_JSEntry`, then `work` (its start
/// line), with no frame of the script after it. Each frame must be stepped: V8's
/// exit frame into C++, the C frames by their CFI, the entry frame back into JavaScript.
#[test]
fn javascript_called_back_from_a_native_addon_is_named_above_it() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = node_workload("addon.js");
    let lines = script_functions(&script, &["work", "drive"]);
    let (top, work, drive) = (&lines[0], &lines[1], &lines[2]);
    let dir = scratch_dir("node-addon");
    let out = dir.join("out.folded");
    for (version, node) in nodes() {
        let what = format!("Node {version}");
        let addon = build_addon(&node, &dir);
        let folded = record_node(&out, &["-F", "499"], &node, &script, &[addon.to_str().unwrap(), "2"]);
        let main = thread_stacks(&folded, busiest_node_thread(&folded));
        let is = |function: &(String, u32, u32)| {
            let (name, line, column) = function.clone();
            move |frame: &str| script_frame(frame, "addon.js") == Some((&name, line, column))
        };
        let in_work =
            |frames: &[String]| script_frames(frames, "addon.js").last() == Some(&(&work.0, work.1, work.2));
        assert_share(&format!("{what}: main thread samples in work"), &main, 0.80, in_work, |_| true);
        let chain: [&dyn Fn(&str) -> bool; 10] = [
            &|frame| frame == "_start",
            &|frame| frame.starts_with("node::Start("),
            &is(top),
            &is(drive),
            &|frame| frame.starts_with("v8impl::"),
            &|frame| frame == "call_many",
            &|frame| frame == "napi_call_function",
            &|frame| frame.starts_with("v8::internal::Execution::Call("),
            &|frame| frame == "Builtins_JSEntry",
            &is(work),
        ];
        let whole = |frames: &[String]| in_order(frames, &chain);
        assert_share(&format!("{what}: work's samples with the whole chain"), &main, 0.95, whole, in_work);
    }
}

/// An async function resumed from the event loop, on every Node installed by setup, with no
/// flags: at least 80% of the main thread's samples are in `resumed` (node's start-up is in the
/// rest), named with its start line, and 95% of those are whole, root first: `_start`,
/// `node::Start`, libuv's loop (`uv_run`), the microtask queue V8 runs when node's callback
/// returns (`...RunMicrotasks`, its C++ and its builtin), the builtin by which V8 resumes an
/// `await` (`Builtins_AsyncFunctionAwaitResolveClosure`: a closure of V8's own, with no script
/// and no name, left to its native frame rather than named `(anonymous)`) and `resumed`, and
/// none goes through the script's top level: each slice of its work runs from the loop, after
/// an `await`.
#[test]
fn async_function_resumed_from_the_event_loop_is_named_on_a_whole_stack() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = node_workload("resumed.js");
    let lines = script_functions(&script, &["resumed"]);
    let (top, resumed) = (&lines[0], &lines[1]);
    let dir = scratch_dir("node-async");
    let out = dir.join("out.folded");
    for (version, node) in nodes() {
        let what = format!("Node {version}");
        let folded = record_node(&out, &["-F", "499"], &node, &script, &["2"]);
        let main = thread_stacks(&folded, busiest_node_thread(&folded));
        let in_resumed = |frames: &[String]| {
            script_frames(frames, "resumed.js").last() == Some(&(&resumed.0, resumed.1, resumed.2))
        };
        assert_share(&format!("{what}: main thread samples in resumed"), &main, 0.80, in_resumed, |_| true);
        let chain: [&dyn Fn(&str) -> bool; 6] = [
            &|frame| frame == "_start",
            &|frame| frame.starts_with("node::Start("),
            &|frame| frame == "uv_run",
            &|frame| frame.contains("RunMicrotasks"),
            &|frame| frame == "Builtins_AsyncFunctionAwaitResolveClosure",
            &|frame| script_frame(frame, "resumed.js") == Some((&resumed.0, resumed.1, resumed.2)),
        ];
        let whole = |frames: &[String]| {
            in_order(frames, &chain)
                && !frames
                    .iter()
                    .any(|frame| script_frame(frame, "resumed.js") == Some((&top.0, top.1, top.2)))
        };
        assert_share(
            &format!("{what}: resumed's samples whole, from the loop"),
            &main,
            0.95,
            whole,
            in_resumed,
        );
    }
}

/// A function deoptimized hundreds or thousands of times a second while sampled (about 10 a
/// second on Node 18, whose V8 drops the optimized code at its first deoptimization; at least 5
/// in a second, checked with `--trace-deopt` on a run of its own), on every Node installed by setup, with no flags: at
/// least 85% of the main thread's samples are in `hot`, named with its start line, whether its
/// frame is TurboFan's, the interpreter's, or being rebuilt by the deoptimizer
/// (`Builtins_NotifyDeoptimized` above it), and 95% of them are whole (`_start`,
/// `node::Start`, the script's top level, `drive`, `hot`). No sample names a function of the
/// script off the call path: the script's frames of every sample are the top level, `drive`,
/// `hot`, in this order, or fewer (never `unused`, never another line). The rest: node's
/// start-up, and the samples taken while V8's deoptimizer computes the new frames, a few
/// percent, whose stacks end at `Builtins_DeoptimizationEntry_*` (it has popped the optimized
/// frame off the stack by then: stepped by its frame pointer no further).
#[test]
fn function_deoptimized_while_sampled_keeps_its_name() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = node_workload("deopt.js");
    let lines = script_functions(&script, &["drive", "hot"]);
    let call_path: Vec<(&str, u32, u32)> =
        lines.iter().map(|(name, line, column)| (name.as_str(), *line, *column)).collect();
    let hot = call_path[2];
    let dir = scratch_dir("node-deopt");
    let out = dir.join("out.folded");
    for (version, node) in nodes() {
        let what = format!("Node {version}");
        let traced = std::process::Command::new(&node)
            .args(["--trace-deopt", script.to_str().unwrap(), "1"])
            .output()
            .unwrap();
        assert!(traced.status.success());
        let deoptimized = String::from_utf8_lossy(&traced.stdout)
            .lines()
            .filter(|line| line.contains("bailout") && line.contains("<JSFunction hot "))
            .count();
        eprintln!("{what}: hot deoptimized {deoptimized} times in 1 s");
        assert!(deoptimized >= 5, "{what}: hot deoptimized {deoptimized} times in 1 s");
        let folded = record_node(&out, &["-F", "499"], &node, &script, &["2"]);
        let main = thread_stacks(&folded, busiest_node_thread(&folded));
        let in_hot = |frames: &[String]| script_frames(frames, "deopt.js").last() == Some(&hot);
        assert_share(&format!("{what}: main thread samples in hot"), &main, 0.85, in_hot, |_| true);
        let on_the_call_path = |frames: &[String]| along(&call_path, &script_frames(frames, "deopt.js"));
        assert_share(
            &format!("{what}: samples naming the script on its call path"),
            &main,
            1.0,
            on_the_call_path,
            |_| true,
        );
        let whole = |frames: &[String]| {
            frames.first().is_some_and(|frame| frame == "_start")
                && frames.iter().any(|frame| frame.starts_with("node::Start("))
                && script_frames(frames, "deopt.js") == call_path
        };
        assert_share(&format!("{what}: hot's samples whole"), &main, 0.95, whole, in_hot);
        let in_deoptimizer = weight_of(&main, |frames| {
            frames.first().is_some_and(|frame| frame.starts_with("Builtins_DeoptimizationEntry"))
        });
        let rebuilt = weight_of(&main, |frames| {
            in_hot(frames) && frames.iter().any(|frame| frame == "Builtins_NotifyDeoptimized")
        });
        eprintln!("{what}: {in_deoptimizer} samples cut in the deoptimizer, {rebuilt} in hot being rebuilt");
    }
}

/// The stacks of the process's main thread: the root (`comm-TID` with `--per-thread`) of most
/// of the stacks that start at `_start` (other threads start at `__clone3`).
fn main_thread_stacks(folded: &Folded) -> Vec<(&[String], u64)> {
    let mut roots = std::collections::BTreeMap::<&str, u64>::new();
    for (frames, count) in &folded.stacks {
        if frames.get(1).is_some_and(|frame| frame == "_start") {
            *roots.entry(&frames[0]).or_default() += count;
        }
    }
    let (root, _) = roots.iter().max_by_key(|(_, n)| **n).expect("a stack from _start");
    let tid = root.rsplit_once('-').unwrap().1.parse().unwrap();
    thread_stacks(folded, tid)
}

/// A JavaScript function blocking its thread (`Atomics.wait`, 20 ms at a time for 2 s), on
/// every Node installed by setup, with no flags. With `--off-cpu` (blocked time) and `--wall`
/// (time on and off the CPU): at least 1.5 s of the main thread's time is in `waiter`, named with
/// its start line, and 95% of the main thread's time inside the script is (node's start-up before
/// it, which reads files and can take a second on a cold disk, and its loop after it are not
/// counted). With `--off-cpu`, 95% of waiter's time is on whole stacks, root first: `_start`,
/// `node::Start`, the script's top level, `waiter`, then V8's and the C library's frames down to
/// the kernel's, where the thread slept (the leaf, `_[k]`). In both, no sample names a function
/// of the script off its call path (`spinner`, never called).
#[test]
fn javascript_function_blocked_off_the_cpu_is_named() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = node_workload("blocked.js");
    let lines = script_functions(&script, &["waiter"]);
    let call_path: Vec<(&str, u32, u32)> =
        lines.iter().map(|(name, line, column)| (name.as_str(), *line, *column)).collect();
    let waiter = call_path[1];
    let dir = scratch_dir("node-off-cpu");
    let out = dir.join("out.folded");
    for (version, node) in nodes() {
        for mode in ["--off-cpu", "--wall"] {
            let what = format!("Node {version} {mode}");
            let folded = record_node(&out, &[mode], &node, &script, &["2"]);
            let main = main_thread_stacks(&folded);
            let in_waiter = |frames: &[String]| script_frames(frames, "blocked.js").last() == Some(&waiter);
            let on_the_call_path =
                |frames: &[String]| along(&call_path, &script_frames(frames, "blocked.js"));
            assert_share(
                &format!("{what}: weight naming the script on its call path"),
                &main,
                1.0,
                on_the_call_path,
                |_| true,
            );
            let in_the_script = |frames: &[String]| !script_frames(frames, "blocked.js").is_empty();
            assert_share(
                &format!("{what}: main thread's weight in the script in waiter"),
                &main,
                0.95,
                in_waiter,
                in_the_script,
            );
            let waited = weight_of(&main, in_waiter);
            assert!(waited >= 1_500_000, "{what}: {waited} µs in waiter, which waits for 2 s");
            if mode == "--off-cpu" {
                let whole = |frames: &[String]| {
                    frames.first().is_some_and(|frame| frame == "_start")
                        && frames.iter().any(|frame| frame.starts_with("node::Start("))
                        && script_frames(frames, "blocked.js") == call_path
                        && frames.last().is_some_and(|leaf| leaf.ends_with("_[k]"))
                };
                assert_share(
                    &format!("{what}: waiter's blocked time on whole stacks"),
                    &main,
                    0.95,
                    whole,
                    in_waiter,
                );
            }
        }
    }
}

/// `profiler agent` on a running Node (the system's, with no flags), cutting a window a second
/// into pprof files for about 3 s of its CPU: at least 90% of the samples of its windows (all
/// its threads; V8's compiler and GC threads have a few) name alpha, beta or gamma as pprof
/// functions with shares.js as their file and the line they start on (6, 61, 116), with their
/// 60/30/10 shares ± 5 points; the last window, cut short by SIGTERM, is in it too.
#[test]
fn agent_windows_name_javascript_functions_with_no_flags() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = node_workload("shares.js");
    let dir = scratch_dir("node-agent");
    let running = spawn(Path::new("node"), &[script.to_str().unwrap(), "30"]);
    wait_for_cpu(running.pid(), Duration::from_millis(500));
    let agent = start_agent_into(&running.pid().to_string(), &dir);
    wait_for_cpu(running.pid(), Duration::from_secs(3));
    agent.signal(libc::SIGTERM);
    assert!(agent.wait().0.success());
    let windows: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(windows.len() >= 3, "{} windows in about 3 s", windows.len());
    let lines = script_functions(&script, &["alpha", "beta", "gamma"]);
    let (mut named, mut total) = ([0i64; 3], 0);
    for window in &windows {
        let profile = read_pprof(window);
        let string = |index: i64| profile.string_table[index as usize].as_str();
        for sample in &profile.sample {
            total += sample.value[0];
            // Innermost first: the first of the three names the sample.
            let innermost =
                sample.location_id.iter().flat_map(|&id| &profile.location[id as usize - 1].line).find_map(
                    |line| {
                        let function = &profile.function[line.function_id as usize - 1];
                        let which = lines[1..].iter().position(|(name, ..)| name == string(function.name))?;
                        let in_script = string(function.filename).ends_with("/shares.js");
                        let (_, start_line, start_column) = lines[which + 1];
                        let at_start =
                            (line.line, line.column) == (i64::from(start_line), i64::from(start_column));
                        assert!(
                            in_script && at_start,
                            "{} named at {}:{}:{}",
                            string(function.name),
                            string(function.filename),
                            line.line,
                            line.column
                        );
                        Some(which)
                    },
                );
            if let Some(which) = innermost {
                named[which] += sample.value[0];
            }
        }
    }
    let all: i64 = named.iter().sum();
    eprintln!("alpha, beta, gamma: {named:?} of {total} samples in {} windows", windows.len());
    assert!(all as f64 >= 0.9 * total as f64, "{all} of {total} samples named");
    assert_shares_of_the_work("the agent's windows", named.map(|n| n as u64));
}
