//! End to end, as root on a host shared with other users: what one unprivileged user (nobody)
//! can make the runtime readers and the tables the profiler shares between processes do. Each
//! test runs the attack as nobody, checks that its path was taken (the hostile input was read),
//! and that the profiler stayed within its bounds, ended on time and named everyone else's
//! processes: a memory budget for what targets describe about themselves, descriptors no
//! target can multiply, modules that are what their files are, bounded reads per sample, kernel
//! tables shared fairly, reads that never wait for a FUSE daemon, `/proc/PID/maps` read with a
//! bound, no kernel addresses in exports, and an agent whose tables stay flat.

use std::{
    io::{BufRead as _, BufReader},
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::common::*;

// Alone on the machine: the tests keep the CPUs busy with their floods.

/// Debian's CPython, which nobody can run (pyenv's live under /root).
const SYSTEM_PYTHON: &str = "/usr/bin/python3.11";

/// A scratch directory nobody owns.
fn nobodys_dir(test: &str) -> PathBuf {
    let dir = scratch_dir(test);
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    dir
}

/// `program ARGS` run as nobody, once it has printed its first line (`ready`, `main TID`).
fn start_as_nobody(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> KillOnDrop {
    let mut child =
        as_nobody(program).args(args).stdout(Stdio::piped()).stdin(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "the workload ended before it was ready");
    KillOnDrop(child)
}

/// The lines of `stderr` that contain `text`.
fn said<'a>(stderr: &'a str, text: &str) -> Vec<&'a str> {
    stderr.lines().filter(|line| line.contains(text)).collect()
}

/// A megabyte line table shared by 3000 code objects, and 200 tables of their own: a few
/// megabytes of the target's, which a reader keeping each code object's table whole would
/// hold 3 GiB of (OOM-killed at 1.5 GiB within seconds). The profiler, in a 512 MiB memory
/// cgroup, stays within its budget, and names the functions it read.
#[test]
fn python_code_that_describes_itself_at_length_costs_a_bounded_memory() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let script = crate::common::python::script("line_table_flood.py");
    for (case, count, distinct) in [("shared", "3000", "0"), ("distinct", "200", "1")] {
        let dir = scratch_dir(&format!("line-tables-{case}"));
        let workload = {
            let mut command = as_nobody(SYSTEM_PYTHON);
            command.env("DISTINCT", distinct).arg(&script).args(["60", count]);
            let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            KillOnDrop(child)
        };
        let cgroup = MemoryCgroup::new(&format!("line-tables-{case}"), 512 << 20);
        let out = dir.join("out.folded");
        let pid = workload.pid().to_string();
        let run = cgroup
            .profiler(&["record", "-p", &pid, "-F", "999", "-d", "6", "-o", out.to_str().unwrap()])
            .output();
        let run = run.unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        eprintln!("{case}: {stderr}");
        assert!(run.status.success(), "{case}: {stderr}");
        let peak = cgroup.peak();
        eprintln!("{case}: {} MiB at the peak", peak >> 20);
        assert!(peak < 192 << 20, "{case}: {} MiB at the peak", peak >> 20);
        let text = std::fs::read_to_string(&out).unwrap();
        let named: std::collections::BTreeSet<&str> =
            text.split(';').filter_map(|frame| frame.strip_prefix("fresh_")?.split(' ').next()).collect();
        assert!(named.len() >= 100, "{case}: the code objects were read: {} named", named.len());
    }
}

/// One process of nobody's maps 25,000 small files named like an interpreter, which a reader
/// of runtimes looks into; the profiler runs with 1024 descriptors. A program root starts
/// afterwards in the same system-wide recording is named in full: descriptors kept for targets'
/// files are capped, and the least recently used make room.
#[test]
fn a_process_mapping_thousands_of_files_leaves_descriptors_for_others() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let dir = nobodys_dir("descriptors");
    let flood = build_workload("maps_flood.c", "maps_flood", "gcc", &["-O2"]);
    let files = dir.join("files");
    std::fs::create_dir(&files).unwrap();
    std::os::unix::fs::chown(&files, Some(NOBODY), Some(NOBODY)).unwrap();
    let _flood = start_as_nobody(&flood, &["files", files.to_str().unwrap(), "25000", "60"]);
    let out = dir.join("out.folded");
    let profiler = env!("CARGO_BIN_EXE_profiler");
    let recording = Command::new("prlimit")
        .args(["--nofile=1024:1024", "--", profiler, "record", "-a", "-F", "499", "-d", "10", "-o"])
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The flood looked at first; then a program of root's.
    std::thread::sleep(Duration::from_secs(4));
    let split = split_with_frame_pointers();
    let status = Command::new(&split).arg("3").stdout(Stdio::null()).status().unwrap();
    assert!(status.success());
    let run = recording.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    eprintln!("{stderr}");
    assert!(run.status.success());
    assert!(
        !said(&stderr, "descriptors kept for targets' files").is_empty(),
        "the flood's files took every descriptor kept at some point:\n{stderr}"
    );
    let folded = Folded::read(&out);
    let mine =
        Folded { stacks: folded.stacks.into_iter().filter(|(frames, _)| frames[0] == "split-fp").collect() };
    assert_split(&mine, "main", 10.0, 0.9);
}

/// Root's program uses root's library; nobody made a copy of it with another name for its hot
/// function and the same build id, and ran it first. Root's process is named from its own
/// file, nobody's from nobody's.
#[test]
fn a_users_copy_of_a_library_does_not_name_roots_frames() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let dir = scratch_dir("same-build-id");
    let (roots, nobodys) = (dir.join("root"), dir.join("nobody"));
    std::fs::create_dir_all(&roots).unwrap();
    std::fs::create_dir_all(&nobodys).unwrap();
    let build_id = "-Wl,--build-id=0x5ea1ed00c0ffee00000000000000000000000033";
    let root_lib = libwork(&roots, "inner_of_root", &[build_id]);
    let copy = libwork(&nobodys, "inner_of_nobody", &[build_id]);
    std::os::unix::fs::chown(&nobodys, Some(NOBODY), Some(NOBODY)).unwrap();
    std::os::unix::fs::chown(&copy, Some(NOBODY), Some(NOBODY)).unwrap();
    let app = |dir: &Path, lib: &Path| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/container_app.c");
        let out = dir.join("app");
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        let status = Command::new("gcc")
            .args(["-O2", "-o"])
            .arg(&out)
            .arg(source)
            .arg(lib)
            .arg(rpath)
            .status()
            .unwrap();
        assert!(status.success());
        out
    };
    let (root_app, nobody_app) = (app(&roots, &root_lib), app(&nobodys, &copy));
    std::os::unix::fs::chown(&nobody_app, Some(NOBODY), Some(NOBODY)).unwrap();
    let nobody = KillOnDrop(as_nobody(&nobody_app).arg("30").spawn().unwrap());
    wait_for_cpu(nobody.pid(), Duration::from_millis(300));
    let out = dir.join("out.folded");
    let recording =
        start_profiler(&["record", "-a", "--per-pid", "-F", "499", "-d", "5", "-o", out.to_str().unwrap()]);
    // nobody's copy is sampled (and read) first.
    std::thread::sleep(Duration::from_secs(1));
    let root = spawn(&root_app, &["2"]);
    let root_pid = root.pid();
    let (status, _) = recording.wait();
    assert!(status.success());
    drop((root, nobody));
    let folded = Folded::read(&out);
    let of = |pid: u32, name: &str| -> u64 {
        let root = format!("app-{pid}");
        folded
            .stacks
            .iter()
            .filter(|(frames, _)| frames[0] == root && frames.iter().any(|f| f == name))
            .map(|(_, n)| n)
            .sum()
    };
    let nobody_pid = nobody_app_pid(&folded);
    assert!(of(nobody_pid, "inner_of_nobody") > 100, "nobody's copy was read for nobody's process");
    assert!(of(root_pid, "inner_of_root") > 100, "root's process named from root's file");
    assert_eq!(of(root_pid, "inner_of_nobody"), 0, "never from nobody's copy");
}

/// The pid of the `app` process that ran nobody's copy (its frames name `inner_of_nobody`).
fn nobody_app_pid(folded: &Folded) -> u32 {
    let root = folded
        .stacks
        .iter()
        .find(|(frames, _)| frames.iter().any(|f| f == "inner_of_nobody"))
        .map(|(frames, _)| frames[0].clone())
        .expect("nobody's process was sampled");
    root.rsplit('-').next().unwrap().parse().unwrap()
}

/// Python code that is never the same twice, 300 fresh functions deep in every sample (each
/// with kilobytes of names): naming a sample's frames would take thousands of reads of the
/// target's memory. Each sample costs at most its allowance (the rest is named at later
/// samples, and counted), and root's program in the same system-wide recording keeps its
/// samples.
#[test]
fn fresh_code_in_every_sample_costs_a_bounded_number_of_reads() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let dir = scratch_dir("fresh-code");
    let script = crate::common::python::script("fresh_code.py");
    let _fresh = start_as_nobody(SYSTEM_PYTHON, &[script.to_str().unwrap(), "60", "300"]);
    let out = dir.join("out.folded");
    let recording = start_profiler(&["record", "-a", "-F", "499", "-d", "6", "-o", out.to_str().unwrap()]);
    let split = split_with_frame_pointers();
    let started = Instant::now();
    let status = Command::new(&split).arg("3").stdout(Stdio::null()).status().unwrap();
    assert!(status.success());
    let ran = started.elapsed();
    let (status, stderr) = recording.wait();
    assert!(status.success());
    assert!(
        !said(&stderr, "Python frames left unnamed in their sample").is_empty(),
        "samples spent their allowance of reads:\n{stderr}"
    );
    let folded = Folded::read(&out);
    let mine =
        Folded { stacks: folded.stacks.into_iter().filter(|(frames, _)| frames[0] == "split-fp").collect() };
    // split ran on one CPU of two beside the Python flood: at least a third of its time sampled.
    let expected = ran.as_secs_f64() * 499.0 / 2.0;
    assert!(
        mine.total() as f64 >= expected * 0.66,
        "{} samples of split, {expected:.0} expected",
        mine.total()
    );
    assert_split(&mine, "main", 10.0, 0.9);
}

/// nobody fills what the kernel side shares between processes: 6000 threads off the CPU (the
/// table of followed threads holds 16384) and 2000 Python processes (the table of Python
/// processes holds 4096, a quarter of it for one user: twice that many, because only some are
/// sampled in 8 s). The recordings last their `-d`, and root's programs keep their samples: its
/// thread off the CPU under its waits, its Python under its functions.
#[test]
fn a_user_filling_the_kernel_tables_takes_no_more_than_its_share() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let dir = scratch_dir("kernel-tables");
    let threads = build_workload("threads_flood.c", "threads_flood", "gcc", &["-O2", "-lpthread"]);
    let _flood = start_as_nobody(&threads, &["6000", "60"]);
    let waits = build_workload("off_cpu.c", "off_cpu", "gcc", &["-O2", "-g", "-lpthread"]);
    let out = dir.join("off-cpu.folded");
    let started = Instant::now();
    let recording = start_profiler(&["record", "-a", "--off-cpu", "-d", "5", "-o", out.to_str().unwrap()]);
    let status = Command::new(&waits).arg("3").stdout(Stdio::null()).status().unwrap();
    assert!(status.success());
    let (status, stderr) = recording.wait();
    assert!(status.success());
    assert!(started.elapsed() < Duration::from_secs(20), "the recording lasted its -d");
    assert!(
        !said(&stderr, "threads of a user holding its share").is_empty(),
        "nobody's threads took their share of the table:\n{stderr}"
    );
    let folded = Folded::read(&out);
    // Microseconds, in folded stacks of time.
    let slept = weight_with(&folded, |frame| frame == "sleep_inner");
    assert!(slept > 2_000_000, "root's sleeper kept its time off the CPU: {slept} µs of 3 s");
    drop(_flood);

    let flood = crate::common::python::script("prefork_flood.py");
    // Niced, and the recording (and root's Python) at nice -20, so that neither is starved of
    // the CPUs: what is tested is the table, not the scheduler.
    let _pythons =
        start_as_nobody("nice", &["-n", "19", SYSTEM_PYTHON, flood.to_str().unwrap(), "2000", "60"]);
    let shares = crate::common::python::script("shares.py");
    let out = dir.join("python.folded");
    let recording =
        start_profiler_first(&["record", "-a", "-F", "999", "-d", "8", "-o", out.to_str().unwrap()]);
    // Root's Python, favoured by the scheduler over the flood so that it is sampled.
    let status = Command::new("nice")
        .args(["-n", "-20", SYSTEM_PYTHON])
        .arg(&shares)
        .arg("3")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let (status, stderr) = recording.wait();
    assert!(status.success());
    assert!(
        said(&stderr, "by their user holding its share").iter().any(|line| !line.contains(", 0 times by")),
        "nobody's Python processes took their share of the table:\n{stderr}"
    );
    let folded = Folded::read(&out);
    let named = weight_with(&folded, |frame| frame.starts_with("alpha (") || frame.starts_with("beta ("));
    assert!(named > 100, "root's Python is named: {named} samples of alpha and beta");
}

/// The weight of the stacks with a frame that `is` picks.
fn weight_with(folded: &Folded, is: impl Fn(&str) -> bool) -> u64 {
    folded.stacks.iter().filter(|(frames, _)| frames.iter().any(|frame| is(frame))).map(|(_, n)| n).sum()
}

/// A FUSE file system of nobody's (mounted with `allow_other`) that answers everyone but root,
/// and never root: a request it has taken is waited for uninterruptibly, even by a process being
/// killed. nobody's process runs a library from it, and a program posing as CPython keeps its
/// code objects' names in a page of it never touched. Nothing of root's reaches the daemon: the
/// library's frames are named by address, the names are left unread, the recording ends on
/// time, and root's program in it is named.
#[test]
fn a_file_system_that_never_answers_stalls_nothing() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let fuse = StallingFuse::serving_plugin("stall");
    let dir = &fuse.dir;
    let library = fuse.mount.join("lib.so");
    let many_libs = build_workload("many_libs.c", "many_libs", "gcc", &["-O2", "-ldl"]);
    let _user = KillOnDrop(as_nobody(&many_libs).arg("60").arg(&library).spawn().unwrap());
    let fake = build_workload("fake_python.c", "fake/python3.12", "gcc", &["-O1", "-g", "-rdynamic"]);
    let data = fuse.mount.join("data");
    let _posing = KillOnDrop(as_nobody(&fake).args(["60", "names-in"]).arg(&data).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    let out = dir.join("out.folded");
    let started = Instant::now();
    let recording = start_profiler(&["record", "-a", "-F", "499", "-d", "8", "-o", out.to_str().unwrap()]);
    let split = split_with_frame_pointers();
    let status = Command::new(&split).arg("3").stdout(Stdio::null()).status().unwrap();
    assert!(status.success());
    let (status, stderr) = recording.wait();
    let took = started.elapsed();
    assert!(status.success());
    assert!(took < Duration::from_secs(20), "the recording took {took:?} for its 8 s");
    let held = std::fs::read_to_string(&fuse.log).unwrap_or_default();
    assert!(!held.contains("held 0"), "a request of root's reached the daemon:\n{held}");
    assert!(said_unasked(&stderr), "the library was not read, and that was said:\n{stderr}");
    let folded = Folded::read(&out);
    let by_address = weight_with(&folded, |frame| frame.starts_with("lib.so+0x"));
    assert!(by_address > 100, "the library's frames were sampled, and named by address");
    let posing = weight_with(&folded, |frame| frame.starts_with("[unknown Python code]"));
    assert!(posing > 50, "the posing interpreter's frames were walked to its code object");
    let mine =
        Folded { stacks: folded.stacks.into_iter().filter(|(frames, _)| frames[0] == "split-fp").collect() };
    assert_split(&mine, "main", 10.0, 0.9);
}

/// A program posing as CPython maps a page of nobody's FUSE file (above) over the memory that
/// holds its code objects' names and back, again and again, so that a page found present a
/// moment before a read is the daemon's by the read: the read waits for the daemon, for ever.
/// It waits in the profiler's reader, not in the profiler: the reader is abandoned after its
/// deadline, nobody's processes are read no more meanwhile, and the recording ends on time,
/// root's Python named in it.
#[test]
fn a_target_mapping_a_daemons_file_under_a_read_holds_up_only_its_reader() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let mut fuse = StallingFuse::serving_plugin("race");
    let dir = fuse.dir.clone();
    let fake = build_workload("fake_python.c", "fake/python3.12", "gcc", &["-O1", "-g", "-rdynamic"]);
    let data = fuse.mount.join("data");
    fuse.keep(KillOnDrop(as_nobody(&fake).args(["60", "names-racing"]).arg(&data).spawn().unwrap()));
    let shares = crate::common::python::script("shares.py");
    let out = dir.join("out.folded");
    let started = Instant::now();
    let recording = start_profiler(&["record", "-a", "-F", "499", "-d", "6", "-o", out.to_str().unwrap()]);
    let status = Command::new(SYSTEM_PYTHON).arg(&shares).arg("4").stdout(Stdio::null()).status().unwrap();
    assert!(status.success());
    let (status, stderr) = recording.wait();
    let took = started.elapsed();
    assert!(status.success());
    assert!(took < Duration::from_secs(20), "the recording took {took:?} for its 6 s");
    let held = std::fs::read_to_string(&fuse.log).unwrap_or_default();
    assert!(held.contains("held 0 read"), "no read of root's reached the daemon: the race was not run");
    assert!(
        said(&stderr, "got no answer within").iter().any(|line| line.contains("65534")),
        "the reader was abandoned, nobody's processes not read since, and that was said:\n{stderr}"
    );
    let folded = Folded::read(&out);
    let named = weight_with(&folded, |frame| frame.starts_with("alpha (") || frame.starts_with("beta ("));
    assert!(named > 500, "root's Python is named: {named} samples of alpha and beta");
}

/// A process of nobody's holds its own memory's lock for as long as nobody's daemon likes (a
/// read of its own memory through `/proc/self/mem`, of a page of the daemon's file, waits
/// holding it; a thread mapping memory then waits to write it), so that everyone who would look
/// up the links to its mapped files waits too. The profiler, which opens its files through
/// those links, asks a reader, which is abandoned: the recording ends on time, the process's
/// library is opened by its path instead and named, and root's program is named.
#[test]
fn a_process_holding_its_memorys_lock_for_a_daemon_stalls_nothing() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let mut fuse = StallingFuse::serving_plugin("wedge");
    let (dir, plugin) = (fuse.dir.clone(), fuse.plugin.clone());
    let wedged = build_workload("wedged.c", "wedged", "gcc", &["-O2", "-ldl", "-lpthread"]);
    let hold = fuse.mount.join("hold");
    fuse.keep(start_as_nobody(&wedged, &["60", plugin.to_str().unwrap(), hold.to_str().unwrap()]));
    let held = std::fs::read_to_string(&fuse.log).unwrap_or_default();
    assert!(held.contains("held hold read"), "the process's own read is not held: its lock is not taken");
    let out = dir.join("out.folded");
    let started = Instant::now();
    let recording = start_profiler(&["record", "-a", "-F", "499", "-d", "5", "-o", out.to_str().unwrap()]);
    let split = split_with_frame_pointers();
    let status = Command::new(&split).arg("3").stdout(Stdio::null()).status().unwrap();
    assert!(status.success());
    let (status, stderr) = recording.wait();
    let took = started.elapsed();
    assert!(status.success());
    assert!(took < Duration::from_secs(20), "the recording took {took:?} for its 5 s");
    assert!(
        said(&stderr, "got no answer within").iter().any(|line| line.contains("65534")),
        "the lookup of its files' links was abandoned, and that was said:\n{stderr}"
    );
    let folded = Folded::read(&out);
    let (_, in_library) = folded.leaf_samples("plugin_spin", &["main", "plugin_work", "plugin_spin"]);
    assert!(in_library > 500, "its library was named, under main: {in_library} samples");
    let mine =
        Folded { stacks: folded.stacks.into_iter().filter(|(frames, _)| frames[0] == "split-fp").collect() };
    assert_split(&mine, "main", 10.0, 0.9);
}

/// nobody's FUSE file system of `fuse_stall.c`, serving `plugin` as `lib.so`, at `mount` in
/// `dir`, a directory of nobody's: unmounted, its daemon killed, when dropped.
struct StallingFuse {
    dir: PathBuf,
    plugin: PathBuf,
    mount: PathBuf,
    log: PathBuf,
    // Dropped in this order: the daemon's end ends the waits for it, which its users' ends
    // wait for.
    _daemon: KillOnDrop,
    users: Vec<KillOnDrop>,
    _unmount: Unmount,
}

impl StallingFuse {
    /// The file system of the test `name`, in `nobodys_dir("fuse-NAME")`, serving a build of
    /// `plugin.c` of its own.
    fn serving_plugin(name: &str) -> Self {
        let dir = nobodys_dir(&format!("fuse-{name}"));
        let plugin = build_workload(
            "plugin.c",
            &format!("libplugin-{name}.so"),
            "gcc",
            &["-O2", "-g", "-shared", "-fPIC"],
        );
        let daemon = fuse_daemon(&dir);
        let mount = dir.join("mnt");
        std::fs::create_dir(&mount).unwrap();
        std::os::unix::fs::chown(&mount, Some(NOBODY), Some(NOBODY)).unwrap();
        let log = dir.join("daemon.log");
        // As nobody logged in: with the bounding set of capabilities a user has, so that the
        // setuid fusermount3 can mount for it.
        let fuse = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&daemon)
            .arg(&mount)
            .arg(&plugin)
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let fuse = KillOnDrop(fuse);
        let mounted = Instant::now();
        while !std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(mount.to_str().unwrap()) {
            assert!(mounted.elapsed() < Duration::from_secs(10), "the FUSE file system was not mounted");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { _unmount: Unmount(mount.clone()), dir, plugin, mount, log, _daemon: fuse, users: Vec::new() }
    }

    /// Keeps `process`, which uses the file system, until the daemon has gone.
    fn keep(&mut self, process: KillOnDrop) {
        self.users.push(process);
    }
}

/// `fuse_stall.c` built in `dir`, where nobody can run it.
fn fuse_daemon(dir: &Path) -> PathBuf {
    let daemon = dir.join("fuse_stall");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/fuse_stall.c");
    let built = Command::new("gcc")
        .args(["-O2", "-I/usr/include/fuse3", "-o"])
        .arg(&daemon)
        .arg(source)
        .args(["-lfuse3", "-lpthread"])
        .status()
        .unwrap();
    assert!(built.success(), "building the FUSE daemon (libfuse3-dev) failed");
    daemon
}

/// `/dev/fuse` open to every user while it lives, as Debian leaves it; as it was after.
struct FuseForUsers(Option<u32>);

impl FuseForUsers {
    fn new() -> Self {
        let mode = std::fs::metadata("/dev/fuse").expect("/dev/fuse (the fuse module)").mode() & 0o7777;
        if mode & 0o006 == 0o006 {
            return Self(None);
        }
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666)).unwrap();
        Self(Some(mode))
    }
}

impl Drop for FuseForUsers {
    fn drop(&mut self) {
        if let Some(mode) = self.0 {
            let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode));
        }
    }
}

/// Unmounts a FUSE file system when dropped (its daemon killed first).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).stderr(Stdio::null()).status();
    }
}

/// A process whose `/proc/PID/maps` is 80 MB (20,000 mappings of hard links under paths of
/// 4 KB), and one that runs from a path that is not UTF-8: the first is read up to the bound
/// (said in the summary), the profiler within 192 MiB in a 512 MiB cgroup; the second is named.
#[test]
fn proc_maps_are_read_with_a_bound_and_any_bytes() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let dir = nobodys_dir("proc-maps");
    let flood = build_workload("maps_flood.c", "maps_flood", "gcc", &["-O2"]);
    let links = dir.join("links");
    std::fs::create_dir(&links).unwrap();
    std::os::unix::fs::chown(&links, Some(NOBODY), Some(NOBODY)).unwrap();
    let long = start_as_nobody(&flood, &["links", links.to_str().unwrap(), "20000", "60"]);
    let maps_len = std::fs::read(format!("/proc/{}/maps", long.pid())).unwrap().len();
    assert!(maps_len > 64 << 20, "the maps are long: {maps_len} bytes");
    let odd = dir.join(std::ffi::OsStr::from_bytes(b"caf\xe9-\xff"));
    std::fs::copy(split_with_frame_pointers(), &odd).unwrap();
    std::fs::set_permissions(&odd, std::fs::Permissions::from_mode(0o755)).unwrap();
    let odd_run = KillOnDrop(as_nobody(&odd).arg("30").stdout(Stdio::null()).spawn().unwrap());
    wait_for_cpu(odd_run.pid(), Duration::from_millis(300));
    let out = dir.join("out.folded");
    let cgroup = MemoryCgroup::new("proc-maps", 512 << 20);
    let (long_pid, odd_pid) = (long.pid().to_string(), odd_run.pid().to_string());
    let args =
        ["record", "-p", &long_pid, "-p", &odd_pid, "-F", "499", "-d", "5", "-o", out.to_str().unwrap()];
    let run = cgroup.profiler(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    eprintln!("{stderr}");
    assert!(run.status.success());
    let peak = cgroup.peak();
    assert!(peak < 192 << 20, "{} MiB at the peak", peak >> 20);
    assert!(!said(&stderr, "/proc/PID/maps stopped at").is_empty(), "the long maps were cut:\n{stderr}");
    let folded = Folded::read(&out);
    let (hot, _) = folded.leaf_samples("hot_a", &["main", "burn"]);
    assert!(hot > 200, "the program at a path that is not UTF-8 is named");
    let (spun, _) = folded.leaf_samples("spin_in_flood", &[]);
    assert!(spun > 200, "the one with long maps too");
}

use std::os::unix::ffi::OsStrExt as _;

/// A recording's pprof and the agent's profiles locate kernel frames nowhere (named, at address
/// 0, no function named by its hex), unless `--kernel-addresses` asks for them.
#[test]
fn exports_carry_no_kernel_addresses_unless_asked() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("kernel-addresses");
    // A program in the kernel often: reads of /proc.
    let busy = KillOnDrop(
        Command::new("sh").args(["-c", "while :; do cat /proc/self/maps > /dev/null; done"]).spawn().unwrap(),
    );
    let pid = busy.pid().to_string();
    for asked in [false, true] {
        let out = dir.join(format!("{asked}.pb.gz"));
        let mut args = vec!["record", "-p", &pid, "-F", "999", "-d", "2", "-o", out.to_str().unwrap()];
        if asked {
            args.push("--kernel-addresses");
        }
        assert!(run_bounded(&args).status.success());
        let addresses = kernel_addresses(&out);
        assert!(!addresses.is_empty(), "kernel frames were sampled");
        if asked {
            assert!(addresses.iter().all(|&a| a >= 0xffff_8000_0000_0000), "{addresses:x?}");
        } else {
            assert!(addresses.iter().all(|&a| a == 0), "{addresses:x?}");
        }
    }
    let files = dir.join("agent");
    std::fs::create_dir(&files).unwrap();
    let agent = start_agent_into(&pid, &files);
    std::thread::sleep(Duration::from_millis(2500));
    agent.signal(libc::SIGTERM);
    assert!(agent.wait().0.success());
    let profiles: Vec<PathBuf> = std::fs::read_dir(&files).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(!profiles.is_empty());
    for profile in profiles {
        let addresses = kernel_addresses(&profile);
        assert!(addresses.iter().all(|&a| a == 0), "{}: {addresses:x?}", profile.display());
    }
}

/// The addresses of the locations of kernel frames in a pprof file, after checking that no
/// function is named by a kernel address.
fn kernel_addresses(path: &Path) -> Vec<u64> {
    let profile = read_pprof(path);
    let kernel =
        profile.mapping.iter().position(|m| profile.string_table[m.filename as usize] == "[kernel.kallsyms]");
    let Some(kernel) = kernel else { return Vec::new() };
    for function in &profile.function {
        let name = &profile.string_table[function.name as usize];
        assert!(!name.starts_with("0xffff"), "a function named by a kernel address: {name}");
    }
    profile.location.iter().filter(|l| l.mapping_id as usize == kernel + 1).map(|l| l.address).collect()
}

/// A host that makes up new Python functions all day, each with kilobytes of names: the
/// agent, cutting a window a second, names the new ones in its latest windows and holds no
/// more after half a minute than after 15 s.
#[test]
fn the_agents_tables_stay_flat_on_a_host_making_up_code() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let dir = scratch_dir("agent-flat");
    let script = crate::common::python::script("fresh_code.py");
    let fresh = start_as_nobody(SYSTEM_PYTHON, &[script.to_str().unwrap(), "120", "1"]);
    let files = dir.join("windows");
    std::fs::create_dir(&files).unwrap();
    let pid = fresh.pid().to_string();
    let agent = start_agent_into(&pid, &files);
    std::thread::sleep(Duration::from_secs(15));
    let early = rss(agent.pid());
    std::thread::sleep(Duration::from_secs(20));
    let late = rss(agent.pid());
    agent.signal(libc::SIGTERM);
    assert!(agent.wait().0.success());
    eprintln!("agent RSS {} MiB after 15 s, {} MiB after 35 s", early >> 20, late >> 20);
    assert!(late <= early + (16 << 20), "the agent grew from {} to {} MiB", early >> 20, late >> 20);
    let mut windows: Vec<PathBuf> = std::fs::read_dir(&files).unwrap().map(|e| e.unwrap().path()).collect();
    windows.sort_by_key(|path| {
        std::fs::metadata(path).unwrap().mtime_nsec()
            + std::fs::metadata(path).unwrap().mtime() * 1_000_000_000
    });
    // The last file is the part of a window cut short by SIGTERM, maybe a few samples; the one
    // before it is the last whole second.
    assert!(windows.len() >= 2, "{} windows", windows.len());
    let last_whole = read_pprof(&windows[windows.len() - 2]);
    let fresh_names = last_whole.string_table.iter().filter(|s| s.starts_with("fresh_")).count();
    assert!(fresh_names > 10, "the last whole window names the functions made up lately: {fresh_names}");
}

/// The resident memory of process `pid` now, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// `record -a -F 499 -d 3` beside a program of root's that keeps a CPU busy (split) and a
/// program of nobody's, its `control` first (as busy, and harmless), then its `attack`: each
/// recording ends within a second of its duration, its output written, and in the attack's the
/// root program keeps at least 90% of the samples it has in the control's, for each second of
/// CPU it had while sampled (an attack may take CPU of its own: forks of a process with tens of thousands of
/// mappings do). Both programs print `ready` once they run. Returns the recordings, whose
/// attack's stderr says whether the attack was read.
fn record_beside(name: &str, control: &mut Command, attack: &mut Command) -> Beside {
    let _alone = alone_on_the_machine();
    let dir = nobodys_dir(name);
    let root = spawn(&split_with_frame_pointers(), &["60"]);
    let record = |what: &str, beside: &mut Command| {
        let mut child = beside.stdout(Stdio::piped()).stdin(Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{what}: the program of nobody's did not start");
        let _beside = KillOnDrop(child);
        let out = dir.join(format!("{what}.folded"));
        let started = Instant::now();
        let recording = start_profiler(&[
            "record",
            "-a",
            "--per-pid",
            "-F",
            "499",
            "-d",
            "3",
            "-o",
            out.to_str().unwrap(),
        ]);
        // Root's CPU time while it is sampled: from the readiness line, for the 3 s. Starting
        // and finishing beside the attack can take longer than beside its control, and root's
        // program runs unsampled meanwhile (counted, it once put the ratio at 0.895).
        let cpu = cpu_time(root.pid());
        std::thread::sleep(Duration::from_secs(3));
        let cpu = cpu_time(root.pid()) - cpu;
        let (status, stderr) = recording.wait();
        let took = started.elapsed();
        assert!(status.success(), "{what}: {stderr}");
        // On time: held by the attack, it would last for ever (a second of start and finish
        // beside a loaded machine's other tests is not that, and once failed at 4 s).
        assert!(took < Duration::from_secs(6), "{what}: `record -d 3` took {took:?}");
        let samples =
            crate::common::python::weight(&thread_stacks(&Folded::read(&out), root.pid()), |_| true);
        eprintln!("{name}: {what}: root's program has {samples} samples in {cpu:?} of CPU");
        (samples as f64 / cpu.as_secs_f64(), stderr, Folded::read(&out))
    };
    let (controlled, _, control) = record("control", control);
    let (attacked, stderr, attack) = record("attack", attack);
    assert!(
        attacked >= 0.9 * controlled,
        "{name}: root's program has {attacked:.0} samples a second of CPU beside the attack, {controlled:.0} \
         beside its control"
    );
    Beside { stderr, control, attack }
}

/// What [`record_beside`] recorded.
struct Beside {
    /// The attack's recording's.
    stderr: String,
    control: Folded,
    attack: Folded,
}

/// `fake_eval_loop.c` built to pose as CPython with `jumps` jumps from its eval loop into
/// `parts` parts of `part_bytes` each, named `python3.11`, in a directory of its own.
fn fake_eval_loop(jumps: u32, parts: u32, part_bytes: u32) -> PathBuf {
    let defines =
        [format!("-DJUMPS={jumps}"), format!("-DPARTS={parts}"), format!("-DPART_BYTES={part_bytes}")];
    let mut flags = vec!["-O1", "-rdynamic"];
    flags.extend(defines.iter().map(String::as_str));
    build_workload("fake_eval_loop.c", &format!("eval-loop-{jumps}-{parts}/python3.11"), "gcc", &flags)
}

/// Whether `stderr` says the fake interpreter was read: the kernel walked its frames (and found
/// no thread of its own in its runtime).
fn python_read(stderr: &str) -> bool {
    said(stderr, "samples with Python frames").iter().any(|line| !line.contains(" 0 cut by a failed read"))
        || said(stderr, "of threads without a Python thread state")
            .iter()
            .any(|line| !line.contains(" 0 of threads"))
}

/// A 2.4 MB "python3.11" of nobody's whose eval loop is 400,000 jumps, each landing at another
/// place of the part they jump into: looking for the parts split off the loop went through every
/// landing at each jump (a recording stalled for three minutes, and its first Ctrl-C was
/// ignored). Read in time, off the thread that drains samples, beside a root program.
#[test]
fn an_interpreter_whose_eval_loop_is_hundreds_of_thousands_of_jumps() {
    if !e2e_enabled() {
        return;
    }
    let (control, attack) = (fake_eval_loop(2, 1, 16), fake_eval_loop(400_000, 1, 400_002));
    assert!(std::fs::metadata(&attack).unwrap().len() > 2 << 20);
    let stderr =
        record_beside("eval-loop-jumps", as_nobody(&control).arg("30"), as_nobody(&attack).arg("30")).stderr;
    assert!(python_read(&stderr), "the fake interpreter was read:\n{stderr}");
}

/// A "python3.11" of nobody's whose eval loop jumps into 4,000 parts of its own, each with its
/// unwind entry: the ranges the eval loop's frames are looked up in are kept to a few, each
/// native frame looked up with a search.
#[test]
fn an_interpreter_whose_eval_loop_jumps_into_thousands_of_parts() {
    if !e2e_enabled() {
        return;
    }
    let (control, attack) = (fake_eval_loop(2, 1, 16), fake_eval_loop(400_000, 4_000, 16));
    let stderr =
        record_beside("eval-loop-parts", as_nobody(&control).arg("30"), as_nobody(&attack).arg("30")).stderr;
    assert!(python_read(&stderr), "the fake interpreter was read:\n{stderr}");
}

/// A process of nobody's that maps root's `node` once whole and 60,000 times more a page of it,
/// and runs 1,000 frames deep in anonymous code whose frames read as JavaScript's: V8's stepper
/// went through every mapping of the binary at every frame (0.1 s a sample, samples of others
/// lost). Its ranges are kept to a few, each frame looked up with a search.
#[test]
fn node_mapped_sixty_thousand_times_under_a_thousand_frames() {
    if !e2e_enabled() {
        return;
    }
    let node = Path::new("/usr/bin/node");
    assert!(node.exists(), "Debian's node is installed (`cargo xtask setup`)");
    let program = build_workload("v8_maps.c", "v8_maps", "gcc", &["-O2"]);
    let node = node.to_str().unwrap();
    let stderr = record_beside(
        "node-mapped",
        as_nobody(&program).args([node, "0", "1000", "30"]),
        as_nobody(&program).args([node, "60000", "1000", "30"]),
    )
    .stderr;
    let read = said(&stderr, "of functions that could not be read");
    assert!(
        read.iter().any(|line| !line.contains(" 0 of functions")),
        "V8 was read in the process, its frames stepped:\n{stderr}"
    );
}

/// A process of nobody's with 60,000 mappings (hard links to one file, under names of 4 KB)
/// forking children that share its table, 32 alive at a time: the recording ends on time and
/// root's program keeps its samples (what a table holds is looked through once for all the
/// processes that share it; maps are read within a time and their user's time, and not again
/// for what a reading cut at its bound could not hold). The control that it was read: the
/// summary says a reading of its maps was cut at its bound, or given up on at its time (the
/// forks copying 60,000 mappings hold the table's lock, and a cold machine's reading waited past
/// 250 ms for it).
#[test]
fn a_fork_storm_sharing_a_huge_table_of_mappings() {
    if !e2e_enabled() {
        return;
    }
    let flood = build_workload("maps_flood.c", "maps_flood", "gcc", &["-O2"]);
    let dir = nobodys_dir("fork-storm-files");
    let files = |name: &str| {
        let files = dir.join(name);
        std::fs::create_dir(&files).unwrap();
        std::os::unix::fs::chown(&files, Some(NOBODY), Some(NOBODY)).unwrap();
        files.to_str().unwrap().to_owned()
    };
    let (few, many) = (files("few"), files("many"));
    let stderr = record_beside(
        "fork-storm",
        as_nobody(&flood).args(["forks", &few, "1", "30"]),
        as_nobody(&flood).args(["forks", &many, "60000", "30"]),
    )
    .stderr;
    let cut = said(&stderr, "/proc/PID/maps stopped at");
    let given_up =
        said(&stderr, "got no answer within").into_iter().any(|line| line.contains(&NOBODY.to_string()));
    assert!(!cut.is_empty() || given_up, "the huge maps were read:\n{stderr}");
}

/// `plugin.c` twice: as it is (`plugin_spin`), and with its hot function named `overlay_spin`,
/// which a recording names only if it read the library from a user's overlay.
fn plugins() -> (PathBuf, PathBuf) {
    let flags = ["-O2", "-g", "-shared", "-fPIC"];
    let read = build_workload("plugin.c", "libplugin-tmpfs.so", "gcc", &flags);
    let unread = build_workload(
        "plugin.c",
        "libplugin-overlay.so",
        "gcc",
        &[&flags[..], &["-Dplugin_spin=overlay_spin"]].concat(),
    );
    (read, unread)
}

/// `user_mounts MODE` as nobody, in a directory of its own, for 30 s, running `library`.
fn user_mounts(mode: &str, name: &str, libraries: &[&Path]) -> Command {
    user_mounts_in(mode, &nobodys_dir(name), libraries)
}

/// [`user_mounts`] in `dir`, as it is.
fn user_mounts_in(mode: &str, dir: &Path, libraries: &[&Path]) -> Command {
    let program = build_workload("user_mounts.c", "user_mounts", "gcc", &["-O2", "-ldl"]);
    let mut command = as_nobody(program);
    command.args([mode, dir.to_str().unwrap(), "30"]).args(libraries);
    command
}

/// The weight of `folded`'s stacks of `program` (its first frame, with or without its pid) with
/// a frame that `is` picks.
fn program_weight(folded: &Folded, program: &str, is: impl Fn(&str) -> bool) -> u64 {
    let theirs = |frames: &[String]| frames[0].starts_with(program);
    folded
        .stacks
        .iter()
        .filter(|(frames, _)| theirs(frames) && frames.iter().any(|f| is(f)))
        .map(|(_, n)| n)
        .sum()
}

/// [`program_weight`] of the stacks of `user_mounts`.
fn user_mounts_weight(folded: &Folded, is: impl Fn(&str) -> bool) -> u64 {
    program_weight(folded, "user_mounts", is)
}

/// Whether `stderr` says files of file systems never asked were left unread.
fn said_unasked(stderr: &str) -> bool {
    said(stderr, "were not read: ").iter().any(|line| line.contains("FUSE"))
}

/// nobody, in user and mount namespaces of its own, mounts an overlay without `userxattr` (the
/// kernel allows it) and runs a library from it: its layers are whatever nobody chose (a FUSE
/// daemon's included), so it is not read, whatever its options; its frames are named by address.
/// The control: the same library from a tmpfs of nobody's, which holds memory, read and named.
#[test]
fn a_users_overlay_without_userxattr_is_not_read() {
    if !e2e_enabled() {
        return;
    }
    let (read, unread) = plugins();
    let beside = record_beside(
        "overlay-no-userxattr",
        &mut user_mounts("tmpfs", "overlay-control", &[&read]),
        &mut user_mounts("overlay", "overlay-attack", &[&unread]),
    );
    assert_user_mount_unread(&beside);
}

/// The control's library (from a tmpfs) named, the attack's (from nobody's overlay) sampled and
/// named by address, and said so.
fn assert_user_mount_unread(beside: &Beside) {
    let Beside { stderr, control, attack } = beside;
    let named = user_mounts_weight(control, |frame| frame == "plugin_spin");
    assert!(
        named > 100,
        "the control's library (a tmpfs of nobody's, root's overlay) was read: {named} samples"
    );
    let by_address = user_mounts_weight(attack, |frame| frame.starts_with("libplugin-overlay.so+0x"));
    assert!(by_address > 100, "the overlay's library was sampled, named by address: {by_address} samples");
    let named = user_mounts_weight(attack, |frame| frame == "overlay_spin");
    assert_eq!(named, 0, "nothing was read from nobody's overlay");
    assert!(said_unasked(stderr), "what was not read was said:\n{stderr}");
}

/// An overlay root mounted (a container's) is read in the user namespace a process of nobody's
/// made, whose mount namespace copied it: a user's mount never shows in the profiler's, this one
/// does. An overlay of nobody's bound at another place by nobody is not read: a bind mount is
/// its file system's.
#[test]
fn a_containers_overlay_copied_into_a_user_namespace_is_read() {
    if !e2e_enabled() {
        return;
    }
    let (read, unread) = plugins();
    let dir = nobodys_dir("overlay-copied");
    for layer in ["lower", "upper", "work", "merged"] {
        std::fs::create_dir(dir.join(layer)).unwrap();
    }
    std::fs::copy(&read, dir.join("lower").join(read.file_name().unwrap())).unwrap();
    let options = format!("lowerdir={0}/lower,upperdir={0}/upper,workdir={0}/work", dir.display());
    let merged = dir.join("merged");
    let mounted =
        Command::new("mount").args(["-t", "overlay", "overlay", "-o", &options]).arg(&merged).status();
    assert!(mounted.unwrap().success(), "root's overlay mounted");
    let unmount = Unmount(merged);
    let beside = record_beside(
        "overlay-copied-recorded",
        &mut user_mounts_in("copied", &dir, &[&read]),
        &mut user_mounts("bind", "overlay-copied-users", &[&unread]),
    );
    assert_user_mount_unread(&beside);
    drop(unmount);
}

/// nobody mounts a tmpfs, runs a library from it until the recording has read it, then unmounts
/// it and mounts an overlay that takes its device number: taken from a table of mounts read
/// earlier, the number said "tmpfs", and the overlay was read as the kernel's. Who answers is
/// asked of each file: the tmpfs's library is named, the overlay's by address.
#[test]
fn a_device_number_a_user_freed_does_not_vouch_for_the_next_mount() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let (read, unread) = plugins();
    let mut workload = user_mounts("reuse", "device-reuse", &[&read, &unread])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(workload.stdout.take().unwrap()).lines();
    let mut input = workload.stdin.take().unwrap();
    let _workload = KillOnDrop(workload);
    assert_eq!(lines.next().unwrap().unwrap(), "ready", "the tmpfs's library runs");
    let out = nobodys_dir("device-reuse-out").join("out.folded");
    let started = Instant::now();
    let recording = start_profiler(&["record", "-a", "-F", "499", "-d", "6", "-o", out.to_str().unwrap()]);
    std::thread::sleep(Duration::from_secs(3));
    std::io::Write::write_all(&mut input, b"now\n").unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "reused", "the overlay took the tmpfs's device number");
    let (status, stderr) = recording.wait();
    let took = started.elapsed();
    assert!(status.success(), "{stderr}");
    assert!(took < Duration::from_secs(8), "the recording took {took:?} for its 6 s");
    let folded = Folded::read(&out);
    let named = user_mounts_weight(&folded, |frame| frame == "plugin_spin");
    assert!(named > 100, "the tmpfs's library was read, the process seen there: {named} samples");
    let by_address = user_mounts_weight(&folded, |frame| frame.starts_with("libplugin-overlay.so+0x"));
    assert!(by_address > 100, "the overlay's library was sampled, named by address: {by_address} samples");
    assert_eq!(
        user_mounts_weight(&folded, |frame| frame == "overlay_spin"),
        0,
        "nothing read from the overlay"
    );
    assert!(said_unasked(&stderr), "what was not read was said:\n{stderr}");
}

/// nobody keeps 300 user and mount namespaces churning (each a process that mounts a tmpfs,
/// runs 2 ms, sleeps 1 s and leaves: 300 new ones a second) while a program of root's runs again
/// and again: the mount of each file is asked of the kernel's tables by its id, no namespace's
/// mount table is read. The recording ends on time, root's programs keep their samples and are
/// named, and the churning processes were sampled.
#[test]
fn three_hundred_mount_namespaces_churning_beside_a_program_run_in_a_loop() {
    if !e2e_enabled() {
        return;
    }
    let (read, _) = plugins();
    let dir = scratch_dir("namespace-churn-execs");
    let again = dir.join("again");
    std::fs::copy(split_with_frame_pointers(), &again).unwrap();
    let script = format!("while :; do {} 0.05 > /dev/null; done", again.display());
    let _execs = KillOnDrop(Command::new("sh").args(["-c", &script]).spawn().unwrap());
    let beside = record_beside(
        "namespace-churn",
        &mut user_mounts("tmpfs", "churn-control", &[&read]),
        &mut user_mounts("churn", "churn-attack", &[]),
    );
    let churned = user_mounts_weight(&beside.attack, |_| true);
    assert!(churned > 20, "the churning processes were sampled: {churned} samples");
    let all = program_weight(&beside.attack, "again", |_| true);
    let named = program_weight(&beside.attack, "again", |frame| frame == "main");
    assert!(all > 100, "the program run in a loop was sampled: {all} samples");
    assert!(named as f64 >= 0.9 * all as f64, "and named: {named} of {all} samples through main");
}

/// nobody, in user and mount namespaces of its own, runs a FUSE daemon that holds every request
/// a process of root's makes (whatever credentials it comes with: an overlay reads its layers
/// with its mounter's), and runs a library from it through an overlay of it, then through a bind
/// mount of it. Nothing of root's reaches the daemon: a recording lasts its `-d` and writes its
/// output, and the first Ctrl-C ends another; the library's frames are named by address, root's
/// program in full.
#[test]
fn a_fuse_daemon_behind_a_users_overlay_or_bind_mount_is_never_asked() {
    if !e2e_enabled() {
        return;
    }
    let _alone = alone_on_the_machine();
    let _fuse = FuseForUsers::new();
    let daemon = fuse_daemon(&nobodys_dir("fuse-behind-daemon"));
    let (plugin, _) = plugins();
    let root = spawn(&split_with_frame_pointers(), &["120"]);
    for mode in ["fuse-overlay", "fuse-bind"] {
        let dir = format!("fuse-behind-{mode}");
        let mut workload = user_mounts(mode, &dir, &[&plugin, &daemon]);
        let workload = workload.stdout(Stdio::piped()).stdin(Stdio::null()).spawn().unwrap();
        let mut workload = KillOnDrop(workload);
        let mut line = String::new();
        BufReader::new(workload.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{mode}: the library runs from the daemon's file system");
        let out = nobodys_dir(&format!("{dir}-out"));
        for (case, duration, interrupted) in [("lasting", "3", false), ("interrupted", "60", true)] {
            let out = out.join(format!("{case}.folded"));
            let started = Instant::now();
            let recording =
                start_profiler(&["record", "-a", "-F", "499", "-d", duration, "-o", out.to_str().unwrap()]);
            if interrupted {
                std::thread::sleep(Duration::from_secs(2));
                recording.signal(libc::SIGINT);
            }
            let (status, stderr) = recording.wait();
            let took = started.elapsed();
            assert!(status.success(), "{mode}, {case}: {stderr}");
            assert!(took < Duration::from_secs(5), "{mode}, {case}: the recording took {took:?}");
            let held = std::fs::read_to_string(
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e").join(&dir).join("daemon.log"),
            )
            .unwrap_or_default();
            assert!(held.is_empty(), "{mode}, {case}: a request of root's reached the daemon:\n{held}");
            assert!(said_unasked(&stderr), "{mode}, {case}: what was not read was said:\n{stderr}");
            let folded = Folded::read(&out);
            let by_address = user_mounts_weight(&folded, |frame| frame.starts_with("lib.so+0x"));
            assert!(
                by_address > 50,
                "{mode}, {case}: the library was sampled, named by address: {by_address}"
            );
            let all = program_weight(&folded, "split-fp", |_| true);
            let named = program_weight(&folded, "split-fp", |frame| frame == "main");
            assert!(
                all > 100 && named as f64 >= 0.9 * all as f64,
                "{mode}, {case}: root's program: {named} of {all}"
            );
        }
    }
    drop(root);
}
