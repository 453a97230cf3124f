//! End to end, as root: targets that try to hang, crash or fool the profiler through what they
//! control. Perf maps that are FIFOs, devices, other users' files or links to root's secrets; a
//! container whose paths and debug links point at the host; a library truncated under the
//! profiler; more libraries than the soft limit on open files; a fork storm larger than the
//! kernel's table of followed processes; debug information nested deeper than a recursive
//! reader's stack; names made of terminal escapes, XML-breaking characters and folded-format
//! separators. Each recording must end on time with valid outputs, show none of the planted
//! names, and say what it refused.

use std::{
    io::Write as _,
    os::unix::fs::{PermissionsExt as _, symlink},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use crate::common::*;

// Alone on the machine: the tests that keep many processes busy, and those that count samples of
// one (on two CPUs, ten busy programs starve a workload whose samples another test counts).

/// Records the JIT workload for two seconds with `plant` put at its perf map's path first:
/// `forbidden` must not appear, and one warning must say the map was not read.
fn record_with_perf_map(name: &str, plant: impl FnOnce(&Path, &str), forbidden: &str) {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir(name);
    let (workload, code) = unprivileged_jit();
    let map = PathBuf::from(format!("/tmp/perf-{}.map", workload.pid()));
    let _ = std::fs::remove_file(&map);
    plant(&map, &code);
    let out = dir.join("out.folded");
    let pid = workload.pid().to_string();
    let run = run_bounded(&["record", "-p", &pid, "-F", "999", "-d", "2", "-o", out.to_str().unwrap()]);
    let _ = std::fs::remove_file(&map);
    assert!(run.status.success());
    let folded = std::fs::read_to_string(&out).expect("the output was written");
    assert!(folded.contains("[unknown]"), "the JIT code was sampled:\n{folded}");
    assert!(!folded.contains(forbidden), "{forbidden} named a frame:\n{folded}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let warnings = stderr.lines().filter(|line| line.contains(&format!("perf map of PID {pid}"))).count();
    assert_eq!(warnings, 1, "one warning:\n{stderr}");
}

/// A perf map line naming the workload's code.
fn map_line(code: &str, name: &str) -> String {
    format!("{code} {name}\n")
}

#[test]
fn perf_map_that_is_a_fifo() {
    record_with_perf_map(
        "perf-map-fifo",
        |map, _| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                map,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap();
            std::os::unix::fs::chown(map, Some(NOBODY), Some(NOBODY)).unwrap();
        },
        "jit_spin",
    );
}

#[test]
fn perf_map_linked_to_dev_zero() {
    record_with_perf_map("perf-map-zero", |map, _| symlink("/dev/zero", map).unwrap(), "jit_spin");
}

#[test]
fn perf_map_linked_to_a_file_only_root_reads() {
    let secret = PathBuf::from(format!("/tmp/profiler-secret-{}", std::process::id()));
    record_with_perf_map(
        "perf-map-secret",
        |map, code| {
            std::fs::write(&secret, map_line(code, "leaked_root_secret")).unwrap();
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
            symlink(&secret, map).unwrap();
        },
        "leaked_root_secret",
    );
    let _ = std::fs::remove_file(&secret);
}

#[test]
fn perf_map_owned_by_another_user() {
    record_with_perf_map(
        "perf-map-other-user",
        |map, code| {
            std::fs::write(map, map_line(code, "spoofed_by_daemon")).unwrap();
            std::os::unix::fs::chown(map, Some(1), Some(1)).unwrap();
        },
        "spoofed_by_daemon",
    );
}

fn run(program: &str, args: &[&std::ffi::OsStr]) {
    let status = Command::new(program).args(args).status().unwrap();
    assert!(status.success(), "{program} {args:?}");
}

/// Strips `lib` of its debug information and gives it a `.gnu_debuglink` naming `link` with
/// `crc` as the CRC of the debug file it asks for.
fn strip_with_link(lib: &Path, link: &str, crc: u32) {
    run("objcopy", &["--strip-debug".as_ref(), lib.as_os_str()]);
    let mut section = link.as_bytes().to_vec();
    section.push(0);
    section.resize(section.len().next_multiple_of(4), 0);
    section.extend_from_slice(&crc.to_le_bytes());
    let content = lib.with_extension("link");
    std::fs::write(&content, section).unwrap();
    run(
        "objcopy",
        &[format!("--add-section=.gnu_debuglink={}", content.display()).as_ref(), lib.as_os_str()],
    );
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

/// A container: its own mount namespace, rooted (chroot) in a tree the test builds. Its program
/// uses `libwork.so` through an absolute symlink to `/tmp/profiler-host-N/libwork.so`; on the
/// host that path holds a library of the same code with another name for its hot function, and
/// its debug file sits wherever a debug link could lead a reader that resolves paths on the
/// host. The container's library is stripped, with a debug link whose CRC is that of the host's
/// debug file: a plain name, a `..` path, an absolute path. Only the container's own names may
/// appear.
#[test]
fn a_container_cannot_point_the_profiler_at_host_files() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("container");
    let host = tempfile::Builder::new().prefix("profiler-host-").tempdir_in("/tmp").unwrap();
    let host_debug = host.path().join("libwork.debug");
    let host_lib = libwork(host.path(), "inner_on_host", &[]);
    run("objcopy", &["--only-keep-debug".as_ref(), host_lib.as_os_str(), host_debug.as_os_str()]);
    let crc = crc32(&std::fs::read(&host_debug).unwrap());
    // Where the tree's own files are seen from the host, under the debug directory too.
    let tree = dir.join("root");
    let inside = tree.join(host.path().strip_prefix("/").unwrap());
    let under_debug_dir = Path::new("/usr/lib/debug").join(inside.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&under_debug_dir).unwrap();
    std::fs::copy(&host_debug, under_debug_dir.join("libwork.debug")).unwrap();
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::create_dir_all(tree.join("opt/lib")).unwrap();
    symlink(host.path().join("libwork.so"), tree.join("opt/lib/libwork.so")).unwrap();
    for system in ["/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"] {
        let copy = tree.join(system.trim_start_matches('/'));
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::copy(Path::new(system).canonicalize().unwrap(), copy).unwrap();
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/container_app.c");
    let status = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(tree.join("app"))
        .arg(source)
        .arg(&host_lib)
        .arg("-Wl,-rpath,/opt/lib")
        .status()
        .unwrap();
    assert!(status.success());

    let escaping = format!("../..{}", host_debug.display());
    for link in ["libwork.debug", &escaping, host_debug.to_str().unwrap()] {
        let lib = libwork(&inside, "inner_in_container", &[]);
        strip_with_link(&lib, link, crc);
        let out = dir.join("out.folded");
        let tree_arg = tree.to_str().unwrap();
        let argv =
            ["record", "-F", "999", "-o", out.to_str().unwrap(), "--", "unshare", "-m", "chroot", tree_arg];
        let recorded = run_bounded(&[&argv[..], &["/app", "2"]].concat());
        assert!(recorded.status.success());
        let folded = std::fs::read_to_string(&out).unwrap();
        let in_container = Folded::parse(&folded).leaf_samples("inner_in_container", &[]).0;
        assert!(in_container > 100, "{link}: the container's own names:\n{folded}");
        assert!(!folded.contains("inner_on_host"), "{link}: a host file named frames:\n{folded}");
    }
    std::fs::remove_dir_all(Path::new("/usr/lib/debug").join(dir.strip_prefix("/").unwrap())).unwrap();
}

/// A library the target can write, mapped and executed, truncated while profiled past its code:
/// a profiler that maps it and reads its symbols dies of SIGBUS.
#[test]
fn a_target_truncating_its_own_library() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("truncate");
    let source = dir.join("functions.c");
    let functions: String = (0..64)
        .map(|i| {
            format!(
                "__attribute__((noinline)) void fn_{i:02}(unsigned long n) {{ volatile unsigned long x = {i}; \
                 for (unsigned long j = 0; j < n; j++) x = x * 3 + j; }}\n"
            )
        })
        .collect();
    std::fs::write(&source, functions).unwrap();
    let library = dir.join("libfunctions.so");
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success());
    // Anyone may write it: the target's, as far as the profiler is concerned.
    std::fs::set_permissions(&library, std::fs::Permissions::from_mode(0o666)).unwrap();
    let keep = code_end(&library);
    let workload = build_workload("truncate.c", "truncate", "gcc", &["-O2", "-ldl"]);
    let out = dir.join("out.folded");
    let recorded = run_bounded(&[
        "record",
        "-F",
        "999",
        "-o",
        out.to_str().unwrap(),
        "--",
        workload.to_str().unwrap(),
        library.to_str().unwrap(),
        &keep.to_string(),
    ]);
    assert!(recorded.status.success(), "the profiler survived");
    assert_eq!(std::fs::metadata(&library).unwrap().len(), keep, "the library was truncated");
    let folded = Folded::read(&out);
    let after: u64 = (32..64).map(|i| folded.leaf_samples(&format!("fn_{i:02}"), &[]).0).sum();
    assert!(after > 100, "the functions run after the truncation are named: {after} samples");
}

/// The end of a library's executable segment in its file, rounded up to a page.
fn code_end(library: &Path) -> u64 {
    use object::{Object as _, ObjectSegment as _, SegmentFlags};
    let data = std::fs::read(library).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let code = elf
        .segments()
        .find(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
        .unwrap();
    let (offset, size) = code.file_range();
    (offset + size).next_multiple_of(4096)
}

/// 300 distinct libraries (copies of one, each with a build id of its own) in a process, the
/// profiler started with a soft limit of 64 open files: it raises the limit, and every library's
/// frames are named.
#[test]
fn more_libraries_than_the_soft_limit_on_open_files() {
    if !e2e_enabled() {
        return;
    }
    let _cpus = alone_on_the_machine();
    let dir = scratch_dir("many-libs");
    let plugin = std::fs::read(build_plugin(&dir)).unwrap();
    let libraries: Vec<PathBuf> = (0..300u32)
        .map(|i| {
            let copy = dir.join(format!("libplugin-{i}.so"));
            std::fs::write(&copy, with_build_id(&plugin, i)).unwrap();
            copy
        })
        .collect();
    let workload = build_workload("many_libs.c", "many_libs", "gcc", &["-O2", "-ldl"]);
    let out = dir.join("out.folded");
    let mut argv = vec!["--nofile=64:20000", "--", env!("CARGO_BIN_EXE_profiler")];
    argv.extend(["record", "-F", "999", "-o", out.to_str().unwrap(), "--", workload.to_str().unwrap(), "4"]);
    argv.extend(libraries.iter().map(|l| l.to_str().unwrap()));
    let recorded = Command::new("prlimit").args(&argv).output().unwrap();
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    eprintln!("{stderr}");
    assert!(recorded.status.success());
    assert!(!stderr.contains("too many open files"), "{stderr}");
    let folded = Folded::read(&out);
    let unnamed: Vec<&String> =
        folded.stacks.iter().flat_map(|(frames, _)| frames).filter(|f| f.starts_with("libplugin-")).collect();
    assert!(unnamed.is_empty(), "frames named by address: {unnamed:?}");
    assert!(folded.leaf_samples("plugin_spin", &[]).0 > 1000);
}

/// plugin.c, built into `dir`.
fn build_plugin(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/plugin.c");
    let out = dir.join("libplugin.so");
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(source)
        .status()
        .unwrap();
    assert!(status.success());
    out
}

/// An ELF image whose GNU build id is made from `seed`.
fn with_build_id(image: &[u8], seed: u32) -> Vec<u8> {
    use object::{Object as _, ObjectSection as _};
    let elf = object::File::parse(image).unwrap();
    let note = elf.section_by_name(".note.gnu.build-id").unwrap();
    let (offset, size) = note.file_range().unwrap();
    let mut patched = image.to_vec();
    // The note's descriptor (the id itself) ends the section: its last 4 bytes become the seed.
    let end = (offset + size) as usize;
    patched[end - 4..end].copy_from_slice(&seed.to_le_bytes());
    patched
}

/// A process forking more children than the kernel's table of followed processes holds, one
/// after another, each exiting at once: exited ones leave the table, so the last child, which
/// does the work, is still followed.
#[test]
fn a_fork_storm_larger_than_the_table_of_followed_processes() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("fork-storm");
    let workload = build_workload("forks.c", "forks", "gcc", &["-O2"]);
    let out = dir.join("out.folded");
    let workload = workload.to_str().unwrap();
    let recorded =
        run_bounded(&["record", "-F", "999", "-o", out.to_str().unwrap(), "--", workload, "9000", "1"]);
    assert!(recorded.status.success());
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    assert!(!stderr.contains("were not followed"), "{stderr}");
    let folded = Folded::read(&out);
    assert!(folded.leaf_samples("last_child_work", &[]).0 > 300, "the last child is sampled");
}

/// A program spinning in `spin`, whose debug information nests `depth` inlined subroutines
/// inside it (nested_dwarf.S), run by nobody for `seconds`.
fn nested_dwarf_program(depth: u32, seconds: &str) -> (KillOnDrop, PathBuf) {
    let nested = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/nested_dwarf.S");
    let define = format!("-DDEPTH={depth}");
    let flags = ["-O2", "-g0", &define, nested.to_str().unwrap()];
    let program = build_workload("nested_dwarf_main.c", &format!("nested-dwarf-{depth}"), "gcc", &flags);
    let target = as_nobody(&program).arg(seconds).spawn().expect("start the program as nobody");
    (KillOnDrop(target), program)
}

/// How many times `spin` is named in the heaviest stack ending in it (as a function or inlined).
fn spin_frames(folded: &Folded) -> usize {
    let (frames, _) = folded
        .stacks
        .iter()
        .filter(|(frames, _)| frames.last().is_some_and(|leaf| leaf.starts_with("spin")))
        .max_by_key(|(_, count)| *count)
        .expect("samples in spin");
    frames.iter().filter(|frame| frame.starts_with("spin")).count()
}

/// 20,000 nested levels overflow a reader that recurses per level (blazesym's inlined-function
/// parsing): the module is named from its ELF symbols with a warning, and the recording is
/// written. Control: at 100 levels the same debug information is read, each level a frame.
#[test]
fn debug_info_nested_deeper_than_a_recursive_reader_goes() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("nested-dwarf");
    for (depth, named) in [(100, 101), (20_000, 1)] {
        let (target, program) = nested_dwarf_program(depth, "3");
        let out = dir.join(format!("{depth}.folded"));
        let pid = target.pid().to_string();
        let run = run_bounded(&["record", "-F", "999", "-d", "1.5", "-p", &pid, "-o", out.to_str().unwrap()]);
        assert!(run.status.success(), "depth {depth}");
        let folded = Folded::read(&out);
        assert_eq!(spin_frames(&folded), named, "depth {depth}: spin and its inlined levels");
        let stderr = String::from_utf8_lossy(&run.stderr);
        let warning = format!("{}: debug info nests more than 1000 levels deep", program.display());
        assert_eq!(stderr.contains(&warning), depth > 1000, "depth {depth}: {stderr}");
    }
}

/// The agent meets the same program: it keeps running and writes its profiles.
#[test]
fn the_agent_outlives_debug_info_nested_too_deep() {
    if !e2e_enabled() {
        return;
    }
    let (target, _) = nested_dwarf_program(20_000, "5");
    let out = scratch_dir("nested-dwarf-agent").join("profiles");
    let pid = target.pid().to_string();
    let run = run_bounded(&[
        "agent",
        "-p",
        &pid,
        "--service-name",
        "nested",
        "--output-dir",
        out.to_str().unwrap(),
        "--interval",
        "1",
        "-d",
        "3",
    ]);
    assert!(run.status.success());
    let files: Vec<PathBuf> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(files.len() >= 2, "a profile a second: {files:?}");
    let raw = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&files[0])
        .output()
        .expect("run go tool pprof");
    assert!(
        String::from_utf8_lossy(&raw.stdout).contains("spin"),
        "{}",
        String::from_utf8_lossy(&raw.stdout)
    );
}

/// A JIT function's name (from its perf map) and a command name (the name of the link the
/// process was started through) full of what breaks outputs: terminal escapes and control
/// characters, characters XML forbids, markup, a bidirectional override, the folded format's
/// separator and a trailing number that would read as a second count. Every output stays
/// valid and shows the names escaped (the control: they were read).
#[test]
fn hostile_names_leave_every_output_valid() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("hostile-names");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = dir.join("\x1b[2Jj;t\x07");
    symlink(build_workload("jit.c", "jit", "gcc", &["-O2"]), &link).unwrap();
    let (workload, code) = unprivileged_jit_as(&link);
    let map = PathBuf::from(format!("/tmp/perf-{}.map", workload.pid()));
    let name = "jit\x1b]0;pwned\x07\x01 <b>&amp;</b> \u{202e}evil\u{ffff};next 42";
    std::fs::write(&map, map_line(&code, name)).unwrap();
    std::os::unix::fs::chown(&map, Some(NOBODY), Some(NOBODY)).unwrap();
    let outputs = ["out.folded", "out.svg", "out.json", "out.pb.gz", "out.prof"].map(|file| dir.join(file));
    let pid = workload.pid().to_string();
    let mut args = vec!["record", "-p", &pid, "-F", "999", "-d", "2"];
    for output in &outputs {
        args.extend(["-o", output.to_str().unwrap()]);
    }
    let run = run_bounded(&args);
    let _ = std::fs::remove_file(&map);
    assert!(run.status.success());
    assert!(!run.stderr.iter().any(|&byte| byte == 0x1b || byte == 0x07), "raw escapes on the terminal");

    // As pprof and speedscope name it, and as a frame of folded stacks and flame graphs.
    let escaped = "jit\\u{1b}]0;pwned\\u{7}\\u{1} <b>&amp;</b> \\u{202e}evil\\u{ffff};next 42";
    let folded_frame = "jit\\u{1b}]0:pwned\\u{7}\\u{1} <b>&amp:</b> \\u{202e}evil\\u{ffff}:next_42";
    let command = "\\u{1b}[2Jj:t\\u{7}";
    let folded = Folded::read(&outputs[0]);
    let in_jit: u64 = folded
        .stacks
        .iter()
        .filter(|(frames, _)| frames.last().is_some_and(|leaf| leaf.contains("pwned")))
        .map(|(frames, count)| {
            assert_eq!(
                (&frames[0], &frames[frames.len() - 1]),
                (&command.to_owned(), &format!("{folded_frame}_[j]"))
            );
            count
        })
        .sum();
    assert!(in_jit as f64 > 0.9 * folded.total() as f64, "the JIT code named: {:?}", folded.stacks);

    let svg = std::fs::read_to_string(&outputs[1]).unwrap();
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let svg = roxmltree::Document::parse_with_options(&svg, options).expect("the SVG is valid XML");
    let titles: Vec<&str> =
        svg.descendants().filter(|n| n.has_tag_name("title")).filter_map(|n| n.text()).collect();
    assert!(titles.iter().any(|title| title.starts_with(folded_frame)), "{titles:?}");
    assert!(titles.iter().any(|title| title.starts_with(command)), "{titles:?}");

    let speedscope: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&outputs[2]).unwrap()).expect("speedscope JSON parses");
    let frames = speedscope["shared"]["frames"].as_array().unwrap();
    assert!(frames.iter().any(|frame| frame["name"].as_str().unwrap().starts_with(escaped)), "{frames:?}");

    let raw = Command::new("go").args(["tool", "pprof", "-raw"]).arg(&outputs[3]).output().unwrap();
    assert!(raw.status.success(), "go tool pprof: {}", String::from_utf8_lossy(&raw.stderr));
    assert!(String::from_utf8(raw.stdout).unwrap().contains(escaped));

    let report = dir.join("report.folded");
    let reported = run_bounded(&["report", outputs[4].to_str().unwrap(), "-o", report.to_str().unwrap()]);
    assert!(reported.status.success());
    assert_eq!(std::fs::read_to_string(&report).unwrap(), std::fs::read_to_string(&outputs[0]).unwrap());
}

/// The program posing as CPython 3.12 (`fake_python.c`), built as `python3.12` so that it is
/// taken for one.
fn fake_python() -> PathBuf {
    build_workload("fake_python.c", "fake/python3.12", "gcc", &["-O1", "-g", "-rdynamic"])
}

#[test]
fn a_fake_interpreter_whose_thread_list_loops() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("fake-python-threads");
    let out = dir.join("out.folded");
    let program = fake_python();
    let run = run_bounded(&[
        "record",
        "-F",
        "499",
        "-o",
        out.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
        "3",
    ]);
    assert!(run.status.success());
    let text = std::fs::read_to_string(&out).unwrap();
    let folded = Folded::parse(&text);
    let (in_loop, _) = folded.leaf_samples("_PyEval_EvalFrameDefault", &["main"]);
    assert!(in_loop * 10 >= folded.total() * 8, "native frames kept:\n{text}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.lines().any(|line| line.contains("with Python frames")
            && line.contains("threads without a Python thread state")),
        "the walks that found no thread are counted:\n{stderr}"
    );
}

#[test]
fn a_fake_interpreter_whose_frames_loop_under_a_hostile_name() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("fake-python-frames");
    let out = dir.join("out.folded");
    let program = fake_python();
    let argv =
        ["record", "-F", "499", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), "3", "frames"];
    let run = run_bounded(&argv);
    assert!(run.status.success());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains('\x1b'), "no escape reaches the output");
    let folded = Folded::parse(&text);
    let hostile = "a:b\\u{a}\\u{1b}[2J";
    let deepest = text
        .lines()
        .map(|line| line.split(';').filter(|frame| frame.starts_with(hostile)).count())
        .max()
        .unwrap_or(0);
    assert_eq!(deepest, 512, "the endless chain is cut at 512 frames, named, escaped:\n{text}");
    assert!(folded.total() > 100, "samples were recorded");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.lines().any(|line| line.contains("deeper than 512 frames") && !line.contains(" 0 deeper")),
        "the cut stacks are counted:\n{stderr}"
    );
}

/// A perf map of twenty million tiny lines (230 MiB), none naming the code that runs, so that
/// the profiler reads on at each new frame: it keeps a bounded part, says so once, and stays
/// well below what an allocation per line took (over 200 MiB after 8 s), in a 512 MiB memory
/// cgroup.
#[test]
fn a_perf_map_of_millions_of_tiny_lines_is_kept_within_bounds() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("perf-map-millions");
    let (workload, _) = unprivileged_jit();
    let pid = workload.pid().to_string();
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    {
        let mut writer = std::io::BufWriter::new(std::fs::File::create(&map).unwrap());
        for line in 0..20_000_000u64 {
            writeln!(writer, "{:x} 1 f", 0x1000 + line).unwrap();
        }
    }
    assert!(std::fs::metadata(&map).unwrap().len() > 200 << 20);
    std::os::unix::fs::chown(&map, Some(NOBODY), Some(NOBODY)).unwrap();
    let cgroup = MemoryCgroup::new("perf-map-millions", 512 << 20);
    let out = dir.join("out.folded");
    let run = cgroup
        .profiler(&["record", "-p", &pid, "-F", "999", "-d", "8", "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&map);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let peak = cgroup.peak();
    assert!(peak < 160 << 20, "{} MiB at the peak", peak >> 20);
    let full = stderr
        .lines()
        .filter(|line| line.contains(&format!("the perf map of PID {pid} holds more than")))
        .count();
    assert_eq!(full, 1, "the map was read until full, and that said once:\n{stderr}");
}

/// `count` builds of the split workload with build ids of their own (distinct modules), each
/// made hostile by `spoil` in a directory of nobody's, run by nobody, and recorded with the
/// profiler in a 512 MiB memory cgroup: its stderr and peak memory, and the share of each
/// process's samples in the workload's hot functions (the control that its file was read).
fn record_spoiled_programs(name: &str, count: u32, spoil: impl Fn(&Path)) -> (String, u64, Vec<f64>) {
    let _cpus = alone_on_the_machine();
    let dir = scratch_dir(name);
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    let programs: Vec<PathBuf> = (1..=count)
        .map(|variant| {
            let build_id = format!("-Wl,--build-id=0x{variant:040x}");
            let built = build_workload(
                "split.c",
                &format!("split-{name}-{variant}"),
                "gcc",
                &["-O2", "-g", &build_id],
            );
            let program = dir.join(format!("{name}-{variant}"));
            std::fs::copy(&built, &program).unwrap();
            spoil(&program);
            std::os::unix::fs::chown(&program, Some(NOBODY), Some(NOBODY)).unwrap();
            program
        })
        .collect();
    // Another test thread's fork may still hold a descriptor written through (ETXTBSY).
    std::thread::sleep(std::time::Duration::from_millis(200));
    let workloads: Vec<KillOnDrop> = programs
        .iter()
        .map(|program| KillOnDrop(as_nobody(program).arg("30").stdin(Stdio::null()).spawn().unwrap()))
        .collect();
    let pids: Vec<String> = workloads.iter().map(|workload| workload.pid().to_string()).collect();
    let out = dir.join("out.folded");
    let mut args = vec!["record", "--per-pid", "-F", "999", "-d", "4", "-o", out.to_str().unwrap()];
    for pid in &pids {
        args.extend(["-p", pid]);
    }
    let cgroup = MemoryCgroup::new(name, 512 << 20);
    let run = cgroup.profiler(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stderr}");
    let folded = Folded::read(&out);
    let hot_shares = programs
        .iter()
        .zip(&pids)
        .map(|(program, pid)| {
            let root = format!("{}-{pid}", program.file_name().unwrap().to_str().unwrap());
            let (all, hot) = folded.stacks.iter().filter(|(frames, _)| frames[0] == root).fold(
                (0, 0),
                |(all, hot), (frames, n)| {
                    (all + n, hot + if frames.iter().any(|f| f.starts_with("hot_")) { *n } else { 0 })
                },
            );
            hot as f64 / all.max(1) as f64
        })
        .collect();
    drop(workloads);
    (stderr, cgroup.peak(), hot_shares)
}

/// Five executables that nobody owns and runs, each 256 MiB of which all but the first pages
/// are a hole (no disk and no memory for their owner): files their owner can change are copied
/// before the profiler maps them, and whole copies took 1.3 GiB. Copies keep holes as holes and
/// leave code out, so the profiler stays small, and names the functions of all five.
#[test]
fn sparse_executables_cost_their_data_only() {
    if !e2e_enabled() {
        return;
    }
    let (stderr, peak, hot_shares) = record_spoiled_programs("sparse", 5, |program| {
        std::fs::OpenOptions::new().write(true).open(program).unwrap().set_len(256 << 20).unwrap();
    });
    assert!(peak < 160 << 20, "{} MiB at the peak\n{stderr}", peak >> 20);
    assert!(hot_shares.iter().all(|&share| share >= 0.9), "{hot_shares:?}");
}

/// Ten executables of 140 KiB whose `.debug_frame` and `.debug_info` are zlib-compressed
/// sections of 60 MiB each: inflated as they came, the CFI alone took 600 MiB. Inflated
/// sections share one budget, so the profiler stays within it, says how often it left sections
/// compressed, and still names the functions of all ten from their symbols.
#[test]
fn compressed_sections_inflate_within_one_budget() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("compressed-sections");
    let zeros = dir.join("zeros");
    std::fs::File::create(&zeros).unwrap().set_len(60 << 20).unwrap();
    let (stderr, peak, hot_shares) = record_spoiled_programs("compressed", 10, |program| {
        let section = |name: &str| format!("{name}={}", zeros.display());
        let objcopy = |args: &[&str]| {
            assert!(Command::new("objcopy").args(args).arg(program).status().unwrap().success())
        };
        objcopy(&["--remove-section", ".debug_frame", "--remove-section", ".debug_info"]);
        objcopy(&["--add-section", &section(".debug_frame"), "--add-section", &section(".debug_info")]);
        // Added sections are compressed by a later pass only.
        objcopy(&["--compress-debug-sections=zlib"]);
        assert!(std::fs::metadata(program).unwrap().len() < 512 << 10);
    });
    assert!(peak < 256 << 20, "{} MiB at the peak\n{stderr}", peak >> 20);
    assert!(
        stderr.contains(
            "compressed sections were left compressed: the 128 MiB for inflated sections was spent"
        ),
        "{stderr}"
    );
    assert!(hot_shares.iter().all(|&share| share >= 0.9), "{hot_shares:?}");
}

/// A process of nobody's with 30,000 mappings that starts thousands of children sharing its
/// address space (`clone(CLONE_VM)`, as `posix_spawn` does), each gone at once: a copy of the
/// mapping table per child took 18 GiB. Children share their parent's table, so the profiler
/// (`-a`, in a 512 MiB memory cgroup) stays small while the children come and go.
#[test]
fn children_sharing_a_large_address_space_share_its_table() {
    if !e2e_enabled() {
        return;
    }
    let _cpus = alone_on_the_machine();
    let program = build_workload("clone_vm.c", "clone_vm", "gcc", &["-O2"]);
    let mut workload = KillOnDrop(
        as_nobody(&program).args(["8", "30000"]).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap(),
    );
    let mut output = std::io::BufReader::new(workload.0.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut output, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    let dir = scratch_dir("clone-vm");
    let out = dir.join("out.folded");
    let cgroup = MemoryCgroup::new("clone-vm", 512 << 20);
    let run = cgroup.profiler(&["record", "-a", "-d", "3", "-o", out.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let peak = cgroup.peak();
    assert!(peak < 160 << 20, "{} MiB at the peak\n{stderr}", peak >> 20);
    assert!(Folded::read(&out).roots().contains_key("clone_vm"), "the workload was sampled");
    line.clear();
    std::io::BufRead::read_line(&mut output, &mut line).unwrap();
    let children: u64 = line.trim().parse().unwrap();
    assert!(children > 1000, "{children} children started");
}

/// A process that maps a `libjvm.so` exporting HotSpot's symbols for external tools, with
/// garbage behind them: tables of random bytes, strides of a terabyte, tables never filled in.
/// `profiler check` says it did not read them and why, in bounded time, and goes on.
#[test]
fn a_fake_libjvm_with_garbage_tables_is_refused() {
    if !e2e_enabled() {
        return;
    }
    // Named libjvm.so, as the JVM's library is; an executable, so that it maps itself.
    let fake = build_workload("fake_libjvm.c", "libjvm.so", "gcc", &["-O2", "-rdynamic"]);
    for (mode, reason) in [
        ("random", "no entry of gHotSpotVMStructs reads as one"),
        ("huge-stride", "an entry's stride is 1099511627776"),
        ("not-filled", "not filled in yet"),
    ] {
        let process = spawn(&fake, &[mode, "60"]);
        // Its tables are set up before it works.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let pid = process.pid().to_string();
        let out = run_bounded(&["check", "-p", &pid]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line =
            stdout.lines().find(|l| l.contains("HotSpot JVM")).unwrap_or_else(|| panic!("{mode}: {stdout}"));
        assert!(line.starts_with("WARN") && line.contains(reason), "{mode}: {line}");
        // Recorded: its own native frames, and the JVM it is not said once in the summary.
        let dir = scratch_dir(&format!("fake-libjvm-{mode}"));
        let folded = dir.join("out.folded");
        let out = run_bounded(&["record", "-p", &pid, "-d", "2", "-o", folded.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode}: {stderr}");
        let said: Vec<&str> = stderr.lines().filter(|l| l.contains("HotSpot JVM not read")).collect();
        assert!(said.len() == 1 && said[0].contains(&pid) && said[0].contains(reason), "{mode}: {stderr}");
        let folded = Folded::read(&folded);
        let (working, total) = (folded.leaf_samples("fake_work", &["main", "fake_work"]).1, folded.total());
        // Enough to judge a share by: beside the other tests the target may get half a CPU.
        assert!(
            total >= 50 && working * 10 >= total * 9,
            "{mode}: {working} of {total} samples in main;fake_work"
        );
    }
}
