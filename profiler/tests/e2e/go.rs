//! Go programs, as shipped (stripped, position-independent or not) and not, on every Go setup
//! installs: Debian stable's 1.19 and unstable's newest two. Their stacks are unwound and named
//! from Go's own table of functions, with no flags, and their goroutines' pprof labels read into
//! every output; a stripped Go tool nobody here wrote (`gofmt`) is attached to while it runs,
//! and esbuild's official builds by Go 1.14 and 1.15 (from npm) are recorded.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use crate::common::*;

/// The Go releases the tests must find (setup installs them).
const RELEASES: [&str; 3] = ["1.19", "1.26", "1.27"];

/// Where Go's stacks start: a goroutine's first frame, a thread's, the program's, and the
/// scheduler's on a thread's own stack (`mcall` leaves a goroutine's for it for good).
const STARTS: [&str; 4] = ["runtime.goexit", "runtime.mstart", "runtime.rt0_go", "runtime.mcall"];
/// Those, and where a thread's stack ends when the goroutine it left for it is not read (Go 1.14
/// and older): the functions that move the stack pointer to the thread's own stack, for the
/// collector's work and to grow a goroutine's.
const OUTERMOST: [&str; 6] = [
    "runtime.goexit",
    "runtime.mstart",
    "runtime.rt0_go",
    "runtime.mcall",
    "runtime.systemstack",
    "runtime.morestack",
];

/// How long `shares` runs, recorded: two seconds, about 2,000 samples, so that a share measured
/// beside another test (1,200 samples of a 1 s run on a busy CI machine put beta at 25%) stays
/// within its 5 points.
const SHARES_SECONDS: &str = "2";

/// Each Go the tests run: its release (`1.26`) and its `go`.
fn toolchains() -> Vec<(String, PathBuf)> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/debian-sid-go/usr/lib");
    let found: BTreeMap<String, PathBuf> = [Path::new("/usr/lib"), &tools]
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let release = path.file_name()?.to_str()?.strip_prefix("go-")?.to_owned();
            let go = path.join("bin/go");
            go.exists().then_some((release, go))
        })
        .collect();
    for release in RELEASES {
        assert!(
            found.contains_key(release),
            "no Go {release} (in /usr/lib/go-{release} or {}): run `cargo xtask setup`",
            tools.display()
        );
    }
    found.into_iter().filter(|(release, _)| RELEASES.contains(&release.as_str())).collect()
}

/// How a Go program is built.
#[derive(Clone, Copy, Debug)]
struct Build {
    pie: bool,
    /// `-ldflags=-s -w`: no symbols, no DWARF.
    stripped: bool,
    /// With cgo on: linked by the C toolchain (external linking).
    cgo: bool,
}

/// `tests/workloads/go/NAME`, built by `go` into `out` as `how` says.
fn build(go: &Path, name: &str, out: &Path, how: Build) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/go").join(name);
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go");
    let mut command = Command::new(go);
    command.arg("build").arg("-o").arg(out);
    if how.pie {
        command.arg("-buildmode=pie");
    }
    if how.stripped {
        command.arg("-ldflags=-s -w");
    }
    let status = command
        .current_dir(&source)
        .env("GOCACHE", cache.join("cache"))
        .env("GOPATH", cache.join("path"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-buildvcs=false")
        .env("CGO_ENABLED", if how.cgo { "1" } else { "0" })
        .status()
        .unwrap();
    assert!(status.success(), "{} build of {name} failed", go.display());
}

/// The stacks of the process (the root frame, its command, dropped).
fn process_stacks(folded: &Folded) -> Vec<(&[String], u64)> {
    folded
        .stacks
        .iter()
        .filter(|(frames, _)| frames.len() > 1)
        .map(|(frames, n)| (&frames[1..], *n))
        .collect()
}

fn share(stacks: &[(&[String], u64)], keep: impl Fn(&[String]) -> bool) -> (u64, u64) {
    let all = stacks.iter().map(|(_, n)| n).sum();
    (stacks.iter().filter(|(frames, _)| keep(frames)).map(|(_, n)| n).sum(), all)
}

/// The line a function's definition starts on in `tests/workloads/go/NAME/FILE`, and the lines
/// of its body.
fn lines_of(name: &str, file: &str, function: &str) -> (i64, std::ops::RangeInclusive<i64>) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/go").join(name).join(file);
    let text = std::fs::read_to_string(&source).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|line| line.starts_with(&format!("func {function}(")));
    let start = start.unwrap_or_else(|| panic!("no func {function} in {}", source.display()));
    let end = match lines[start].ends_with('}') {
        true => start,
        false => start + lines[start..].iter().position(|line| line.starts_with('}')).unwrap(),
    };
    (start as i64 + 1, start as i64 + 1..=end as i64 + 1)
}

/// `shares` (alpha, beta and gamma doing 60/30/10% of the work on two goroutines, `spin` inlined
/// into each), built by every Go, stripped and not, position-independent and not, and stripped,
/// position-independent with cgo (beta's work then done in C, a third, and in a call back into
/// Go from C, which beta calls), recorded 2 s at 999 Hz: in each, 99% of the goroutines' samples
/// whole from `runtime.goexit` (the runtime's own threads, whole from `runtime.mstart`, aside),
/// 99% of the work's through `main.work` and one of the three to `main.spin` (an inlined frame,
/// `_[i]`; beta's through C, and back), the three's shares within 5 points, a fifth of beta's
/// at least in C; in the pprof output, spin's samples on the lines of its body and the three's on the
/// line of their call, as the source says; and stripped PIE builds named by frame pointers alone.
#[test]
fn go_functions_are_named_from_go_s_table_whole_in_every_build() {
    if !e2e_enabled() {
        return;
    }
    let _beside = beside_others();
    let dir = scratch_dir("go-shares");
    let (_, spin_body) = lines_of("shares", "main.go", "spin");
    for (release, go) in toolchains() {
        let builds = [
            (false, false, false),
            (false, true, false),
            (true, false, false),
            (true, true, false),
            (true, true, true),
        ];
        for (pie, stripped, cgo) in builds {
            let how = Build { pie, stripped, cgo };
            let what = format!("Go {release} {how:?}");
            let binary = dir.join(format!("shares-{release}-{pie}-{stripped}-{cgo}"));
            build(&go, "shares", &binary, how);
            let (folded, pprof) = (dir.join("out.folded"), dir.join("out.pb.gz"));
            let args =
                ["record", "-F", "999", "-o", folded.to_str().unwrap(), "-o", pprof.to_str().unwrap(), "--"];
            let run = run_profiler(&[&args[..], &[binary.to_str().unwrap(), SHARES_SECONDS]].concat());
            assert!(run.status.success(), "{what}: {}", String::from_utf8_lossy(&run.stderr));
            let folded = Folded::read(&folded);
            let stacks = process_stacks(&folded);
            // The runtime's own threads (`sysmon`) and the program's start are whole from their
            // roots, and not the goroutines': every other sample must be whole from
            // `runtime.goexit` (a signal handler's on its own stack, say, is not), but where Go
            // does not say where a goroutine left for C: there, a call back from C.
            let crosses = crosses_from_c(&release);
            let is_whole = |frames: &[String]| {
                root(frames) == Some("runtime.goexit")
                    || !crosses && frames.iter().any(|frame| frame == "runtime.cgocallback")
            };
            let of_goroutines = of_goroutines(&stacks);
            let (whole, all) = share(&of_goroutines, is_whole);
            let not_whole: Vec<_> = of_goroutines.iter().filter(|(frames, _)| !is_whole(frames)).collect();
            eprintln!("{what}: {whole} of {all} goroutines' samples whole from runtime.goexit");
            assert!(
                whole as f64 >= 0.99 * all as f64,
                "{what}: only {whole} of {all} whole; some: {not_whole:?}"
            );
            // The work's: through main.work (or C's call back) and one of the three to
            // main.spin, inlined.
            let in_work: Vec<(&[String], u64)> = stacks
                .iter()
                .filter(|(frames, _)| {
                    frames.iter().any(|frame| frame == "main.work" || frame == "main.goBeta_[i]")
                })
                .copied()
                .collect();
            let (working, all_work) = share(&in_work, |frames| {
                ["main.alpha", "main.beta", "main.gamma"].iter().any(|f| through(f, how.cgo, crosses)(frames))
            });
            assert!(
                working as f64 >= 0.99 * all_work as f64,
                "{what}: only {working} of {all_work} samples of main.work through one of the three to main.spin"
            );
            for (function, expected) in [("main.alpha", 60.0), ("main.beta", 30.0), ("main.gamma", 10.0)] {
                let (n, _) = share(&stacks, through(function, how.cgo, crosses));
                let percent = 100.0 * n as f64 / working as f64;
                assert!(
                    (percent - expected).abs() <= 5.0,
                    "{what}: {function} {percent:.1}% (expected {expected}%)"
                );
            }
            if how.cgo {
                // A third of beta's work is C's, each sample of it whole through the call into C.
                let beta = through("main.beta", true, crosses);
                let (beta_all, _) = share(&stacks, &beta);
                let (beta_in_c, _) = share(&stacks, |frames| {
                    beta(frames) && frames.iter().any(|frame| frame == "runtime.asmcgocall")
                });
                eprintln!("{what}: {beta_in_c} of beta's {beta_all} samples in C, whole");
                assert!(
                    beta_in_c as f64 >= 0.2 * beta_all as f64,
                    "{what}: {beta_in_c} of beta's {beta_all} samples in C, whole"
                );
            }
            assert_lines(&what, &pprof, &spin_body, how.cgo);
            if how.stripped && how.pie && !how.cgo {
                assert_named_by_frame_pointers(&what, &dir, &binary);
            }
        }
    }
}

/// `labels` (work under two sets of pprof labels, 60% and 40% of it, on two goroutines), built
/// stripped, and stripped, position-independent and with cgo (where Go's `g` is a thread-local
/// variable of the C toolchain's TLS), by every Go, recorded 1.5 s at 999 Hz: in the pprof
/// output, 95% of main.spin's samples carry their goroutine's `request` label, the two sets'
/// shares within 5 points, `worker` on the first set's alone, the long `path` cut; and flame
/// graphs grouped by `--by-label request` have a frame per value under the command.
#[test]
fn goroutine_labels_are_read_into_every_output() {
    if !e2e_enabled() {
        return;
    }
    let _beside = beside_others();
    let dir = scratch_dir("go-labels");
    for (release, go) in toolchains() {
        for how in
            [Build { pie: false, stripped: true, cgo: false }, Build { pie: true, stripped: true, cgo: true }]
        {
            let what = format!("Go {release} {how:?}");
            let binary = dir.join(format!("labels-{release}-{}", how.cgo));
            build(&go, "labels", &binary, how);
            let (folded, pprof) = (dir.join("out.folded"), dir.join("out.pb.gz"));
            let run = run_profiler(&[
                "record",
                "-F",
                "999",
                "--by-label",
                "request",
                "-o",
                folded.to_str().unwrap(),
                "-o",
                pprof.to_str().unwrap(),
                "--",
                binary.to_str().unwrap(),
                "1.5",
            ]);
            assert!(run.status.success(), "{what}: {}", String::from_utf8_lossy(&run.stderr));
            assert_labels(&what, &pprof);
            let folded = Folded::read(&folded);
            let by_request = |value: &str| {
                let root = format!("request={value}");
                folded
                    .stacks
                    .iter()
                    .filter(|(frames, _)| frames.get(1) == Some(&root))
                    .map(|(_, n)| n)
                    .sum::<u64>()
            };
            let (a, b) = (by_request("a"), by_request("b"));
            let percent = 100.0 * a as f64 / (a + b).max(1) as f64;
            eprintln!("{what}: --by-label request: {a} samples under request=a, {b} under request=b");
            assert!(
                (percent - 60.0).abs() <= 5.0,
                "{what}: request=a {percent:.1}% of the flame graph's labelled"
            );
        }
    }
}

/// The labels of a pprof profile of `labels` (see above).
fn assert_labels(what: &str, pprof: &Path) {
    let profile = read_pprof(pprof);
    let string = |index: i64| profile.string_table[index as usize].as_str();
    let mut by_request: BTreeMap<String, i64> = BTreeMap::new();
    for sample in &profile.sample {
        let functions = sample.location_id.iter().flat_map(|&id| &profile.location[id as usize - 1].line);
        let spins = functions
            .map(|line| profile.function[line.function_id as usize - 1].name)
            .any(|name| string(name) == "main.spin");
        if !spins {
            continue;
        }
        let label = |key: &str| sample.label.iter().find(|l| string(l.key) == key).map(|l| string(l.str));
        let request = label("request").unwrap_or("(none)");
        *by_request.entry(request.to_owned()).or_default() += sample.value[0];
        let expected = match request {
            "a" => (Some("w1"), None),
            "b" => (None, Some(true)),
            _ => (None, None),
        };
        let path = label("path").map(|path| path.starts_with("/long/") && path.ends_with('…'));
        assert_eq!((label("worker"), path), expected, "{what}: the labels of a sample of request {request}");
    }
    let (a, b) = (by_request.get("a").copied().unwrap_or(0), by_request.get("b").copied().unwrap_or(0));
    let all: i64 = by_request.values().sum();
    eprintln!("{what}: main.spin's samples by request: {by_request:?}");
    assert!((a + b) as f64 >= 0.95 * all as f64, "{what}: {} of {all} samples labelled", a + b);
    let percent = 100.0 * a as f64 / (a + b).max(1) as f64;
    assert!((percent - 60.0).abs() <= 5.0, "{what}: request=a {percent:.1}% of the labelled samples");
}

/// With `--call-graph fp` (nothing steps the frames; the chain of frame pointers Go keeps gives
/// them, less a leaf's caller, as ever), the stripped binary's frames are still named from its
/// table: of the samples of the two goroutines doing the work (under `main.main`, and
/// `main.main.func2`: `main.work` is the caller a leaf's chain leaves out), none has a frame
/// named by its offset, and 99% of those in the program's own code name alpha, beta or gamma.
/// Other threads' are not the check's: a busy machine adds the runtime's, and a thread sampled
/// in `runtime.clone`, just made, has a chain of whatever its new stack held.
fn assert_named_by_frame_pointers(what: &str, dir: &Path, binary: &Path) {
    let folded = record_command(dir, &["--call-graph", "fp"], binary, &["1"]);
    let stacks = process_stacks(&folded);
    let stacks: Vec<(&[String], u64)> = stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|frame| frame.starts_with("main.main")))
        .copied()
        .collect();
    let name = binary.file_name().unwrap().to_str().unwrap();
    let (unnamed, _) =
        share(&stacks, |frames| frames.iter().any(|frame| frame.starts_with(&format!("{name}+0x"))));
    let working = |frames: &[String]| {
        frames.iter().any(|frame| ["main.alpha", "main.beta", "main.gamma"].contains(&frame.as_str()))
    };
    // Of the samples in the program's own code: a busy machine adds samples of the runtime
    // (preemption, the clock read between rounds) to the goroutines' (9 of 877 in a CI run).
    let in_own_code = |frames: &[String]| {
        frames
            .iter()
            .rev()
            .find(|frame| !frame.ends_with("_[k]"))
            .is_some_and(|leaf| leaf.starts_with("main."))
    };
    let own: Vec<(&[String], u64)> =
        stacks.iter().filter(|(frames, _)| in_own_code(frames)).copied().collect();
    let (working, all) = share(&own, working);
    eprintln!(
        "{what} --call-graph fp: {working} of {all} samples of the working goroutines in their own code name alpha, beta or gamma, {unnamed} unnamed"
    );
    assert!(
        unnamed == 0 && working as f64 >= 0.99 * all as f64,
        "{what} --call-graph fp: {working} and {unnamed} of {all}"
    );
}

/// The samples of goroutines: all but those of the runtime's own threads (`sysmon`), whole from
/// `runtime.mstart`, of its scheduler, on a thread's own stack from `runtime.mcall` (which a
/// goroutine leaves for good: with cgo, each call into C long enough makes the runtime hand the
/// goroutine's processor over, and schedule), and of the program's start, from `runtime.rt0_go`
/// (or, linked with the C toolchain, the dynamic loader's `_start`), and before it, of the
/// profiler's thread that started it (from `__clone3`, until it runs exec): fixed counts of
/// samples, whose share grows as a busy machine gives the program fewer.
fn of_goroutines<'a>(stacks: &[(&'a [String], u64)]) -> Vec<(&'a [String], u64)> {
    let runtime_own = |frames: &[String]| {
        matches!(
            root(frames),
            Some("runtime.mstart" | "runtime.mcall" | "runtime.rt0_go" | "_start" | "__clone3")
        )
    };
    stacks.iter().filter(|(frames, _)| !runtime_own(frames)).copied().collect()
}

/// The outermost user frame of a stack (root first).
fn root(frames: &[String]) -> Option<&str> {
    frames.iter().map(String::as_str).find(|frame| !frame.ends_with("_[k]"))
}

/// Whether Go `release` says where a goroutine left for C, so that a call back into Go is whole
/// from the goroutine's start: 1.26 and 1.27 leave `runtime.systemstack_switch` as the
/// return address above `runtime.cgocallback`; 1.19 leaves what the goroutine saved last.
fn crosses_from_c(release: &str) -> bool {
    release != "1.19"
}

/// Whether a stack of `shares` (root first) is whole from `runtime.goexit`, through `main.work`
/// and `function` to `main.spin` inlined into it (kernel frames of interrupts left out); built
/// with cgo, beta's through C: from beta, through the runtime's call into C to the C code (on
/// the thread's stack, the goroutine's copied by the kernel), or on to the call back into Go,
/// `main.goBeta` and `main.spin` (both inlined) (the C frames between, on the thread's stack,
/// left out, as Go's own tracebacks leave them), or, where Go does not say where it left for C
/// (`crosses`), through `runtime.cgocallback` to them (the C frames the unwinder finds above it
/// by their CFI, and no more).
fn through(function: &str, cgo: bool, crosses: bool) -> impl Fn(&[String]) -> bool + '_ {
    move |frames: &[String]| {
        let user: Vec<&str> =
            frames.iter().map(String::as_str).filter(|frame| !frame.ends_with("_[k]")).collect();
        let work = user.iter().position(|&frame| frame == "main.work");
        let called_back = user.ends_with(&["main.goBeta_[i]", "main.spin_[i]"]);
        let cgo_beta = cgo && function == "main.beta";
        if cgo_beta && !crosses && called_back {
            return user.contains(&"runtime.cgocallback");
        }
        let called = |work: usize| match cgo_beta {
            true => {
                let from_c = user.iter().position(|&frame| frame == "runtime.cgocallback");
                let after = user.get(work + 2..).unwrap_or_default();
                user.get(work + 1) == Some(&function)
                    && (in_c(after)
                        || from_c.is_some_and(|from_c| {
                            user[..from_c].ends_with(&["runtime.cgocall", "runtime.systemstack_switch"])
                        }) && called_back)
            }
            false => user[work + 1..] == [function, "main.spin_[i]"],
        };
        user.first() == Some(&"runtime.goexit") && work.is_some_and(called)
    }
}

/// Whether the frames after beta's (root first) are its call into C, sampled in the C code.
fn in_c(after_beta: &[&str]) -> bool {
    let into_c = ["main._Cfunc_callBeta", "runtime.cgocall", "runtime.asmcgocall"];
    after_beta.len() > into_c.len()
        && after_beta.starts_with(&into_c)
        && !after_beta[into_c.len()..]
            .iter()
            .any(|frame| frame.starts_with("main.") || frame.starts_with("runtime."))
}

/// In a pprof profile of `shares`: every sample's `main.spin` on a line of its body, and the
/// function it is inlined into on the line of its definition (the one-line function that calls
/// it, in main.go or, for beta's, the file of the build: cgo.go's goBeta or nocgo.go's beta).
fn assert_lines(what: &str, pprof: &Path, spin_body: &std::ops::RangeInclusive<i64>, cgo: bool) {
    let profile = read_pprof(pprof);
    let string = |index: i64| profile.string_table[index as usize].as_str();
    let mut checked = 0;
    for sample in &profile.sample {
        let lines: Vec<(&str, &str, i64)> = sample
            .location_id
            .iter()
            .flat_map(|&id| &profile.location[id as usize - 1].line)
            .map(|line| {
                let function = &profile.function[line.function_id as usize - 1];
                (string(function.name), string(function.filename), line.line)
            })
            .collect();
        let Some(spin) = lines.iter().position(|(name, ..)| *name == "main.spin") else { continue };
        let (_, file, line) = lines[spin];
        assert!(
            file.ends_with("/shares/main.go") && spin_body.contains(&line),
            "{what}: main.spin at {file}:{line}"
        );
        let (caller, _, line) = lines[spin + 1];
        let file = match caller {
            "main.alpha" | "main.gamma" => "main.go",
            _ if cgo => "cgo.go",
            _ => "nocgo.go",
        };
        let (start, _) = lines_of("shares", file, caller.trim_start_matches("main."));
        assert_eq!(line, start, "{what}: {caller} calls spin on the line it starts on");
        checked += sample.value[0];
    }
    assert!(checked > 0, "{what}: no sample of main.spin in {}", pprof.display());
}

/// Each Go's own `gofmt`, a stripped binary of Debian's, formatting Go's standard library (its
/// `src`), attached to while it runs and recorded 2 s: 97% of its samples named (no
/// `gofmt+0x...`), 97% whole to where a Go stack starts (the collector's work on a thread's own
/// stack through to the goroutine it works for), and most of them parsing or printing Go
/// source.
#[test]
fn a_stripped_go_tool_attached_to_while_it_runs_is_named_whole() {
    if !e2e_enabled() {
        return;
    }
    let _beside = beside_others();
    let dir = scratch_dir("go-gofmt");
    for (release, go) in toolchains() {
        let root = go.parent().unwrap().parent().unwrap();
        let gofmt = root.join("bin/gofmt");
        let mut running = KillOnDrop(
            Command::new(&gofmt)
                .arg("-l")
                // Twice over: longer than the recording on a fast machine.
                .arg(root.join("src/"))
                .arg(root.join("src/"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        let out = dir.join(format!("gofmt-{release}.folded"));
        let pid = running.pid().to_string();
        let run = run_profiler(&["record", "-F", "999", "-p", &pid, "-d", "2", "-o", out.to_str().unwrap()]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let _ = running.0.kill();
        let folded = Folded::read(&out);
        let stacks = process_stacks(&folded);
        let what = format!("gofmt of Go {release}");
        let (named, all) = share(&stacks, |frames| !frames.iter().any(|frame| frame.starts_with("gofmt+0x")));
        eprintln!("{what}: {named} of {all} samples named");
        assert!(all >= 200, "{what}: {all} samples");
        assert!(named as f64 >= 0.97 * all as f64, "{what}: {named} of {all} named");
        let (whole, _) = share(&stacks, |frames| STARTS.contains(&frames[0].as_str()));
        eprintln!("{what}: {whole} of {all} samples whole");
        assert!(whole as f64 >= 0.97 * all as f64, "{what}: {whole} of {all} whole");
        let formatting = |frames: &[String]| {
            frames.iter().any(|frame| frame.starts_with("go/parser.") || frame.starts_with("go/printer."))
        };
        let (formatting, _) = share(&stacks, formatting);
        assert!(
            formatting as f64 >= 0.5 * all as f64,
            "{what}: {formatting} of {all} samples in go/parser or go/printer"
        );
    }
}

/// `blocked` (a goroutine blocked in read(2), one waiting on a channel, main asleep) recorded
/// with `--off-cpu` for 2 s, stripped, on every Go: at least 1.5 s of blocked time on whole
/// stacks from `runtime.goexit` through `main.reader` down to the kernel, where its thread
/// slept; and 95% of all the blocked time on stacks that start where Go's do.
#[test]
fn go_blocked_off_the_cpu_is_on_whole_stacks() {
    if !e2e_enabled() {
        return;
    }
    let _beside = beside_others();
    let dir = scratch_dir("go-blocked");
    for (release, go) in toolchains() {
        let binary = dir.join(format!("blocked-{release}"));
        build(&go, "blocked", &binary, Build { pie: false, stripped: true, cgo: false });
        let folded = record_command(&dir, &["--off-cpu"], &binary, &["2"]);
        let stacks = process_stacks(&folded);
        let what = format!("Go {release} --off-cpu");
        // Go wraps a goroutine's function with arguments in a closure of the function that
        // started it (`main.main.func1`).
        let reading = |frames: &[String]| {
            let reader = frames.iter().position(|frame| frame == "main.reader");
            frames.first().is_some_and(|root| root == "runtime.goexit")
                && reader.is_some_and(|at| at <= 2 && frames[at + 1].starts_with("syscall.Read"))
                && frames.last().is_some_and(|leaf| leaf.ends_with("_[k]"))
        };
        let (read, all) = share(&stacks, reading);
        eprintln!("{what}: {read} µs blocked in main.reader on whole stacks, of {all}");
        assert!(read >= 1_500_000, "{what}: {read} µs in main.reader's read, which blocks for 2 s");
        let (whole, _) = share(&stacks, |frames| OUTERMOST.contains(&frames[0].as_str()));
        assert!(whole as f64 >= 0.95 * all as f64, "{what}: {whole} of {all} µs on whole stacks");
    }
}

/// esbuild's official builds by Go 1.14 (0.6.0) and 1.15 (0.8.0), stripped, from npm (`cargo
/// xtask setup` fetches them): Go 1.2's layout of the table, which no Go here writes. Each
/// minifies generated JavaScript, recorded from its start: 97% of its samples named (no
/// `esbuild+0x...`), 97% whole to where a Go stack starts (on 1.14, whose goroutines are not
/// read, or where a thread's stack switched), most of them in esbuild's own code, and calls
/// inlined into its functions named as frames of their own.
#[test]
fn esbuild_built_by_go_1_14_and_1_15_is_named_whole() {
    if !e2e_enabled() {
        return;
    }
    let _beside = beside_others();
    let dir = scratch_dir("go-esbuild");
    let input = dir.join("input.js");
    std::fs::write(&input, generated_javascript(30_000)).unwrap();
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/esbuild");
    for (version, release, ends) in [("0.6.0", "1.14", &OUTERMOST[..]), ("0.8.0", "1.15", &STARTS[..])] {
        let esbuild = tools.join(version).join("bin/esbuild");
        assert!(esbuild.exists(), "no {}: run `cargo xtask setup`", esbuild.display());
        let what = format!("esbuild {version} (Go {release})");
        let out = format!("--outfile={}", dir.join("out.js").display());
        let folded = record_command(&dir, &[], &esbuild, &[input.to_str().unwrap(), "--minify", &out]);
        let stacks = process_stacks(&folded);
        let (named, all) =
            share(&stacks, |frames| !frames.iter().any(|frame| frame.starts_with("esbuild+0x")));
        let (whole, _) = share(&stacks, |frames| ends.contains(&frames[0].as_str()));
        let (own, _) = share(&stacks, |frames| {
            frames.iter().any(|frame| frame.starts_with("github.com/evanw/esbuild/internal/"))
        });
        let (inlined, _) = share(&stacks, |frames| frames.iter().any(|frame| frame.ends_with("_[i]")));
        eprintln!(
            "{what}: of {all} samples, {named} named, {whole} whole, {own} in esbuild's code, {inlined} with inlined calls"
        );
        assert!(all >= 200, "{what}: {all} samples");
        assert!(named as f64 >= 0.97 * all as f64, "{what}: {named} of {all} named");
        assert!(whole as f64 >= 0.97 * all as f64, "{what}: {whole} of {all} whole");
        assert!(own as f64 >= 0.5 * all as f64, "{what}: {own} of {all} in esbuild's code");
        assert!(inlined > 0, "{what}: no inlined calls named");
    }
}

/// `functions` functions of JavaScript, each calling the one before it (about 200 bytes each).
fn generated_javascript(functions: usize) -> String {
    (0..functions)
        .map(|i| {
            format!(
                "function f{i}(a, b) {{ var x = a * {i} + b; if (x > {i}) {{ return f{}(x - 1, b) + \"s{i}\"; }} \
                 for (var k = 0; k < 3; k++) {{ x += k * {}; }} return [x, {i}, \"t{i}\"].join(\",\"); }}\n",
                i.saturating_sub(1),
                i % 7
            )
        })
        .collect()
}
