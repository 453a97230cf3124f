//! Helpers shared by the end-to-end tests: root check, workload builds, running the profiler,
//! and reading folded output.
#![allow(dead_code)] // each test binary uses a different subset

pub mod perl;
pub mod php;
pub mod python;
pub mod ruby;

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    fs::File,
    io::{BufRead as _, BufReader},
    os::unix::process::CommandExt as _,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Output, Stdio},
    sync::{Mutex, mpsc},
    time::{Duration, Instant},
};

pub use profiler::testing::e2e_enabled;

pub fn profiler() -> Command {
    Command::new(env!("CARGO_BIN_EXE_profiler"))
}

/// The test machine, as the tests of one binary share it (two at a time, on two CPUs): the one
/// place where end-to-end tests declare how they run beside one another, each holding its guard
/// while it runs. A test that records beside others holds it shared ([`beside_others`]); one
/// that keeps both CPUs busy (floods, JVMs, Node, a service) or measures what a test beside it
/// would change (how soon a new process's frames are read, the samples of a workload it would
/// starve) holds it alone ([`alone_on_the_machine`]). A test holding neither runs beside any.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Leave to record beside other tests, until dropped.
pub fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The machine to this test alone, until dropped.
pub fn alone_on_the_machine() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A fresh directory for one test's files.
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Compiles `tests/workloads/<source>` with `cc` and `flags` into `<scratch>/<name>`.
pub fn build_workload(source: &str, name: &str, compiler: &str, flags: &[&str]) -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads").join(source);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("workloads").join(name);
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    // Built aside and renamed into place: another test may be running the previous build, which
    // the linker would otherwise rewrite under it (EACCES or ETXTBSY when that test starts it).
    let building = out.with_extension("building");
    let status = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&building)
        .arg(&src)
        .arg("-lpthread")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(status.success(), "building {source} failed");
    std::fs::rename(&building, &out).unwrap();
    out
}

/// Compiles `tests/workloads/<source>` with the rustc next to the cargo running the tests.
pub fn build_rust(source: &str, name: &str, flags: &[&str]) -> PathBuf {
    let rustc = Path::new(env!("CARGO")).with_file_name("rustc");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads").join(source);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("workloads").join(name);
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let status = Command::new(&rustc).args(flags).arg("-o").arg(&out).arg(&src).status().expect("run rustc");
    assert!(status.success(), "building {source} failed");
    out
}

/// Runs `profiler record [-F 999] [extra] -o <dir>/out.folded -- <workload> <args>` (at 999 Hz
/// unless `extra` says `-F`) and returns the folded stacks.
pub fn record_command(dir: &Path, extra: &[&str], workload: &Path, args: &[&str]) -> Folded {
    let out = dir.join("out.folded");
    let mut argv = vec!["record", "-o", out.to_str().unwrap()];
    if !extra.contains(&"-F") {
        argv.extend(["-F", "999"]);
    }
    argv.extend(extra);
    argv.push("--");
    argv.push(workload.to_str().unwrap());
    argv.extend(args);
    let run = run_profiler(&argv);
    assert!(run.status.success());
    Folded::read(&out)
}

/// The 60/30/10 workload, with frame pointers in every function including leaves.
pub fn split_with_frame_pointers() -> PathBuf {
    build_workload("split.c", "split-fp", "gcc", &["-O2", "-g", "-fno-omit-frame-pointer", "-DFRAMED_LEAVES"])
}

/// Runs the profiler to completion.
pub fn run_profiler(args: &[&str]) -> Output {
    let output = profiler().args(args).output().expect("run profiler");
    eprintln!("profiler {args:?}: {}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    output
}

pub fn spawn(program: &Path, args: &[&str]) -> KillOnDrop {
    // A binary written by this process can be briefly "busy" (ETXTBSY): another test thread's
    // fork holds the write descriptor until it execs.
    for _ in 0..100 {
        match Command::new(program).args(args).stdin(Stdio::null()).spawn() {
            Ok(child) => return KillOnDrop(child),
            Err(err) if err.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(err) => panic!("spawn {}: {err}", program.display()),
        }
    }
    panic!("{} stayed busy", program.display());
}

/// A child process killed when the test ends, pass or fail.
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stacks of the thread or process `id` (roots `comm-ID`), without their root.
pub fn thread_stacks(folded: &Folded, id: u32) -> Vec<(&[String], u64)> {
    let suffix = format!("-{id}");
    folded
        .stacks
        .iter()
        .filter(|(frames, _)| frames[0].ends_with(&suffix))
        .map(|(frames, n)| (&frames[1..], *n))
        .collect()
}

/// Folded stacks: frames root first, and counts.
pub struct Folded {
    pub stacks: Vec<(Vec<String>, u64)>,
}

impl Folded {
    pub fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        Self::parse(&text)
    }

    /// The same stacks with every frame name passed through `f`.
    pub fn renamed(self, f: impl Fn(&str) -> String) -> Self {
        let stacks =
            self.stacks.into_iter().map(|(frames, n)| (frames.iter().map(|s| f(s)).collect(), n)).collect();
        Self { stacks }
    }

    pub fn parse(text: &str) -> Self {
        let stacks = text
            .lines()
            .map(|line| {
                let (stack, count) =
                    line.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {line:?}"));
                let count = count.parse().unwrap_or_else(|_| panic!("bad count in {line:?}"));
                (stack.split(';').map(str::to_owned).collect(), count)
            })
            .collect();
        Self { stacks }
    }

    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|(_, n)| n).sum()
    }

    /// The weight of the stacks through `frame`.
    pub fn weight_through(&self, frame: &str) -> u64 {
        self.stacks.iter().filter(|(frames, _)| frames.iter().any(|f| f == frame)).map(|(_, n)| n).sum()
    }

    /// Samples whose innermost user frame (the last one without `_[k]`) is `leaf`, grouped by
    /// whether their user frames contain `chain` (root to leaf, contiguous) ending at the leaf.
    pub fn leaf_samples(&self, leaf: &str, chain: &[&str]) -> (u64, u64) {
        let (mut all, mut complete) = (0, 0);
        for (frames, count) in &self.stacks {
            let user: Vec<&str> =
                frames.iter().map(String::as_str).filter(|f| !f.ends_with("_[k]")).collect();
            if user.last() != Some(&leaf) {
                continue;
            }
            all += count;
            if user.ends_with(chain) {
                complete += count;
            }
        }
        (all, complete)
    }

    /// Share (0-100) of each leaf among the samples of all of them.
    pub fn leaf_shares(&self, leaves: &[&str]) -> BTreeMap<String, f64> {
        let counts: Vec<u64> = leaves.iter().map(|leaf| self.leaf_samples(leaf, &[]).0).collect();
        let total: u64 = counts.iter().sum();
        assert!(total > 0, "no samples in any of {leaves:?}");
        leaves
            .iter()
            .zip(counts)
            .map(|(leaf, n)| (leaf.to_string(), 100.0 * n as f64 / total as f64))
            .collect()
    }

    pub fn roots(&self) -> BTreeMap<String, u64> {
        let mut roots = BTreeMap::new();
        for (frames, count) in &self.stacks {
            *roots.entry(frames[0].clone()).or_default() += count;
        }
        roots
    }
}

/// What a workload's profile must show: each leaf's share of the samples in all the leaves,
/// and the chain (root first, ending at the leaf) its samples must carry.
pub struct Expected {
    pub leaf: String,
    pub share: f64,
    pub chain: Vec<String>,
}

/// The 60/30/10 split of split.c and split.rs: chains from `root` (main or worker), function
/// names made by `name` (`hot_a` -> `split::hot_a` in Rust).
pub fn split_expected(root: &str, name: impl Fn(&str) -> String) -> Vec<Expected> {
    [("a", 60.0), ("b", 30.0), ("c", 10.0)]
        .into_iter()
        .map(|(x, share)| {
            let chain = [root.to_owned(), name("burn"), name("run_round")]
                .into_iter()
                .chain(
                    [format!("{x}_outer"), format!("{x}_middle"), format!("{x}_inner"), format!("hot_{x}")]
                        .map(|f| name(&f)),
                )
                .collect();
            Expected { leaf: name(&format!("hot_{x}")), share, chain }
        })
        .collect()
}

/// Asserts each leaf's share within ±`tolerance` points (or four standard errors of a share
/// measured with that many samples, if more: a workload given a quarter of a CPU by the tests
/// beside it has few, and 3 points was then two of them), that the leaves hold at least 90% of
/// all samples, and that at least `min_complete` of each leaf's samples carry its whole chain.
pub fn assert_profile(folded: &Folded, expected: &[Expected], tolerance: f64, min_complete: f64) {
    let leaves: Vec<&str> = expected.iter().map(|e| e.leaf.as_str()).collect();
    let shares = folded.leaf_shares(&leaves);
    let in_leaves: u64 = leaves.iter().map(|leaf| folded.leaf_samples(leaf, &[]).0).sum();
    eprintln!("shares {shares:?}; {in_leaves} of {} samples in the leaves", folded.total());
    assert!(in_leaves as f64 >= 0.9 * folded.total() as f64, "most samples should be in the leaves");
    for e in expected {
        let share = shares[&e.leaf];
        let p = e.share / 100.0;
        let tolerance = tolerance.max(400.0 * (p * (1.0 - p) / in_leaves.max(1) as f64).sqrt());
        assert!(
            (share - e.share).abs() <= tolerance,
            "{}: {share:.1}% vs {}% ± {tolerance:.1}",
            e.leaf,
            e.share
        );
        let chain: Vec<&str> = e.chain.iter().map(String::as_str).collect();
        let (all, complete) = folded.leaf_samples(&e.leaf, &chain);
        let ratio = complete as f64 / all as f64;
        eprintln!("{}: {complete}/{all} samples with the whole chain", e.leaf);
        assert!(ratio >= min_complete, "{}: only {:.2}% of samples carry {chain:?}", e.leaf, ratio * 100.0);
    }
}

/// The 60/30/10 split of split.c, from `root`.
pub fn assert_split(folded: &Folded, root: &str, tolerance: f64, min_complete: f64) {
    assert_profile(folded, &split_expected(root, str::to_owned), tolerance, min_complete);
}

/// Fill colour of the flame-graph frame whose tooltip starts with `name (`.
pub fn frame_fill(svg: &str, name: &str) -> (u8, u8, u8) {
    let at = svg.find(&format!("<title>{name} (")).unwrap_or_else(|| panic!("no frame {name}"));
    let rgb = &svg[at..][svg[at..].find("fill=\"rgb(").expect("a fill") + 10..];
    let rgb: Vec<u8> = rgb[..rgb.find(')').unwrap()].split(',').map(|c| c.parse().unwrap()).collect();
    (rgb[0], rgb[1], rgb[2])
}

/// An unprivileged user: nobody.
pub const NOBODY: u32 = 65534;

/// `program`, to be run as nobody (user and group, no supplementary groups, no capabilities).
pub fn as_nobody(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new("setpriv");
    command.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ]);
    command.arg(program);
    command
}

/// The longest a profiler may take to end once it is waited for (its `-d` run out, or stopped
/// by a signal), outputs written: beyond it, it is killed and the test fails. A bound on a hang,
/// not a speed: naming eight libpythons' DWARF beside their eight busy interpreters on two CPUs
/// took 30 s on a CI run.
const ENDS_WITHIN: Duration = Duration::from_secs(90);

/// The longest a profiler may take to say it is recording (loading and attaching its eBPF
/// programs): beyond it, the test fails.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Runs the profiler, killing it (and failing) if it has not ended within [`ENDS_WITHIN`].
pub fn run_bounded(args: &[&str]) -> Output {
    let child = profiler().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let watchdog = std::thread::spawn(move || outlived(pid));
    let output = child.wait_with_output().unwrap();
    let killed = watchdog.join().unwrap();
    eprintln!("profiler {args:?}: {}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    assert!(!killed, "the profiler did not end within {ENDS_WITHIN:?} and was killed");
    output
}

/// Waits for process `pid` to be gone (reaped); kills it and returns true if it is still there
/// after [`ENDS_WITHIN`].
fn outlived(pid: u32) -> bool {
    let started = Instant::now();
    while started.elapsed() < ENDS_WITHIN {
        std::thread::sleep(Duration::from_millis(100));
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return false;
        }
    }
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    true
}

/// A profiler started in the background, which has said that it is recording: its stderr is
/// read as it comes, so that it never blocks on a full pipe.
pub struct Started {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// What it wrote to stderr so far, readiness line included.
    stderr: String,
}

/// Whether `line` is the profiler's readiness line (`profiler: recording PID 1234 at 999 Hz
/// (Ctrl-C to stop)`), printed once sampling runs.
pub fn is_readiness(line: &str) -> bool {
    line.starts_with("profiler: ") && line.ends_with(" (Ctrl-C to stop)")
}

/// Starts `profiler ARGS` (standard output discarded) and returns once it says it is recording;
/// fails if it exits first, or has not said so within [`READY_WITHIN`].
pub fn start_profiler(args: &[&str]) -> Started {
    start(profiler(), args, Stdio::null())
}

/// [`start_profiler`], its standard output written to `stdout` (top's plain tables).
pub fn start_profiler_writing(args: &[&str], stdout: std::fs::File) -> Started {
    start(profiler(), args, stdout.into())
}

/// [`start_profiler`] at the highest priority (nice -20), as an operator runs it beside more
/// runnable processes than CPUs: a thousand processes at nice 19 outweigh one at nice 0 ten to
/// one, and leave it too little CPU to empty its ring buffer.
pub fn start_profiler_first(args: &[&str]) -> Started {
    let mut command = Command::new("nice");
    command.args(["-n", "-20"]).arg(profiler().get_program());
    start(command, args, Stdio::null())
}

fn start(mut command: Command, args: &[&str], stdout: Stdio) -> Started {
    eprintln!("profiler {args:?}");
    let mut child =
        command.args(args).stdout(stdout).stderr(Stdio::piped()).spawn().expect("start the profiler");
    let (sender, lines) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || stderr.lines().map_while(Result::ok).try_for_each(|line| sender.send(line)));
    let mut started = Started { child, lines, stderr: String::new() };
    let waiting = Instant::now();
    loop {
        let left = READY_WITHIN.saturating_sub(waiting.elapsed());
        match started.lines.recv_timeout(left) {
            Ok(line) => {
                started.stderr.push_str(&line);
                started.stderr.push('\n');
                if is_readiness(&line) {
                    return started;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = started.child.wait().unwrap();
                panic!("the profiler exited ({status}) before it was recording:\n{}", started.stderr);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = started.child.kill();
                panic!("the profiler was not recording after {READY_WITHIN:?}:\n{}", started.stderr);
            }
        }
    }
}

impl Started {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the profiler.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child, not reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid() as i32, signal) }, 0);
    }

    /// Waits for the profiler to end, killing it (and failing) if it has not within
    /// [`ENDS_WITHIN`]: its exit status and all it wrote to stderr.
    pub fn wait(mut self) -> (ExitStatus, String) {
        let pid = self.pid();
        let watchdog = std::thread::spawn(move || outlived(pid));
        let status = self.child.wait().unwrap();
        let killed = watchdog.join().unwrap();
        // The sender ends with the pipe, once the profiler is gone.
        self.stderr.extend(self.lines.iter().map(|line| line + "\n"));
        eprintln!("profiler: {status}\n{}", self.stderr);
        assert!(!killed, "the profiler did not end within {ENDS_WITHIN:?} and was killed");
        (status, self.stderr)
    }
}

/// CPU time process `pid` has used so far (user and system, all its threads).
pub fn cpu_time(pid: u32) -> Duration {
    // Its name is any bytes.
    let stat = std::fs::read(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|err| panic!("process {pid} is gone: {err}"));
    stat_cpu_time(&String::from_utf8_lossy(&stat), 14)
}

/// CPU time of the children a process waited for, from the text of its `/proc/PID/stat`.
pub fn waited_children_cpu_time(stat: &str) -> Duration {
    stat_cpu_time(stat, 16)
}

/// The user time in field `user` of a `/proc/PID/stat` text, as proc(5) numbers them, plus the
/// system time in the next (a thread's `/proc/PID/task/TID/stat` too).
pub fn stat_cpu_time(stat: &str, user: usize) -> Duration {
    // Fields 3 on come after the command name, in parentheses, which may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    let ticks: u64 = fields[user - 3].parse::<u64>().unwrap() + fields[user - 2].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / ticks_per_second)
}

/// Waits until process `pid` has used `more` CPU time from now: a workload's progress, whatever
/// the machine's load.
pub fn wait_for_cpu(pid: u32, more: Duration) {
    let until = cpu_time(pid) + more;
    while cpu_time(pid) < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The JIT workload run as nobody, writing no perf map of its own: its process and the address
/// and size of its code.
pub fn unprivileged_jit() -> (KillOnDrop, String) {
    unprivileged_jit_as(&build_workload("jit.c", "jit", "gcc", &["-O2"]))
}

/// [`unprivileged_jit`] started through `program`, the JIT workload or a link to it (whose name
/// becomes the process's command name).
pub fn unprivileged_jit_as(program: &Path) -> (KillOnDrop, String) {
    silent_jit(as_nobody(program))
}

/// The JIT workload run as root, writing no perf map of its own, as [`unprivileged_jit`].
pub fn root_jit() -> (KillOnDrop, String) {
    silent_jit(Command::new(build_workload("jit.c", "jit", "gcc", &["-O2"])))
}

fn silent_jit(mut jit: Command) -> (KillOnDrop, String) {
    let mut child = jit.args(["20", "--no-map"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (KillOnDrop(child), line.trim().to_owned())
}

/// A memory cgroup for a profiler fed hostile input: should its bounds fail, the kernel stops it
/// there rather than the machine running out (cgroup v2, or v1's memory hierarchy).
pub struct MemoryCgroup {
    path: PathBuf,
}

impl MemoryCgroup {
    pub fn new(name: &str, limit_bytes: u64) -> Self {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let (base, limit) = if v2 {
            ("/sys/fs/cgroup", "memory.max")
        } else {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        };
        let path = Path::new(base).join(format!("profiler-test-{name}-{}", std::process::id()));
        if let Err(err) = std::fs::create_dir(&path) {
            assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{}: {err}", path.display());
        }
        std::fs::write(path.join(limit), limit_bytes.to_string()).unwrap();
        Self { path }
    }

    /// Moves process `pid` in.
    pub fn add(&self, pid: u32) {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string()).unwrap();
    }

    /// `profiler ARGS`, run inside from its first instruction on.
    pub fn profiler(&self, args: &[&str]) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", r#"echo $$ > "$0/cgroup.procs" && exec "$@""#]).arg(&self.path);
        command.arg(env!("CARGO_BIN_EXE_profiler")).args(args);
        command
    }

    /// The most memory its processes took at once, in bytes.
    pub fn peak(&self) -> u64 {
        let read = |name: &str| std::fs::read_to_string(self.path.join(name)).ok()?.trim().parse().ok();
        read("memory.peak").or_else(|| read("memory.max_usage_in_bytes")).expect("the cgroup's peak memory")
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Empty once its processes are gone.
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// Builds `libwork.so` (`container_lib.c`) into `dir` with `inner` as the name of its hot
/// function, linked with `extra` flags.
pub fn libwork(dir: &Path, inner: &str, extra: &[&str]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/container_lib.c");
    let out = dir.join("libwork.so");
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-shared", "-fPIC", &format!("-DINNER={inner}")])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(source)
        .status()
        .unwrap();
    assert!(status.success());
    out
}

/// `profiler agent -p PID -F 999 --interval 1 --output-dir DIR`, once it samples.
pub fn start_agent_into(pid: &str, dir: &Path) -> Started {
    let dir = dir.to_str().unwrap();
    start_profiler(&["agent", "-p", pid, "-F", "999", "--interval", "1", "--output-dir", dir])
}

/// The pprof profile (gzipped) at `path`.
pub fn read_pprof(path: &Path) -> profiler::pprof::Profile {
    use prost::Message as _;
    use std::io::Read as _;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut raw).unwrap();
    profiler::pprof::Profile::decode(&*raw).unwrap()
}

/// The peak resident memory of process `pid` so far (`VmHWM`), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// The lines of a block of `script` (`def alpha`), from the first that passes `starts` to the
/// next that reads `closing` (`end`, `}`) at its indent: where the line numbers of the frames of
/// a function it defines must fall. Lines count from 1.
pub fn block_lines(
    script: &Path,
    what: &str,
    closing: &str,
    starts: impl Fn(&str) -> bool,
) -> std::ops::RangeInclusive<u32> {
    let source = std::fs::read_to_string(script).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    let start = lines
        .iter()
        .position(|line| starts(line))
        .unwrap_or_else(|| panic!("no {what} in {}", script.display()));
    let indent = &lines[start][..lines[start].len() - lines[start].trim_start().len()];
    let end = lines[start + 1..]
        .iter()
        .position(|line| line.strip_prefix(indent) == Some(closing))
        .unwrap_or_else(|| panic!("{what} in {} has no {closing} at its indent", script.display()));
    (start as u32 + 1)..=((start + 1 + end) as u32 + 1)
}

/// Fails unless at least `fraction` of the weight of `stacks` passes `keep`.
pub fn assert_most(stacks: &[(&[String], u64)], fraction: f64, what: &str, keep: impl Fn(&[String]) -> bool) {
    let (all, kept) = (python::weight(stacks, |_| true), python::weight(stacks, &keep));
    assert!(all > 0, "no samples to check that {what}");
    let failing: Vec<&[String]> =
        stacks.iter().map(|(frames, _)| *frames).filter(|frames| !keep(frames)).collect();
    assert!(
        kept as f64 >= fraction * all as f64,
        "only {kept} of {all} ({:.1}%) {what}; some others: {:?}",
        100.0 * kept as f64 / all as f64,
        &failing[..failing.len().min(3)]
    );
}

/// How the tests run a workload script with an interpreter (Ruby, PHP, Perl): the program, the
/// arguments that go before the script, and what it needs in its environment.
pub struct ScriptRunner<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
}

impl ScriptRunner<'_> {
    /// The interpreter, in the environment it needs, with its arguments: the script and its
    /// arguments are to follow.
    pub fn command(&self) -> Command {
        let mut command = Command::new(self.program);
        command.args(self.args).envs(self.env.iter().map(|(name, value)| (name, value)));
        command
    }
}

/// Runs `scenario` on each of `interpreters` (of `runtime`: `Ruby`, `PHP`), each to its end
/// whatever the others did, beside other tests' recordings, in a scratch directory of its own
/// (`ruby-SCENARIO-LABEL`), and fails naming every one it failed on (each failure's message is
/// printed as it happens). `describe` gives an interpreter's label and path.
pub fn on_every<T>(
    runtime: &str,
    interpreters: &[T],
    describe: impl Fn(&T) -> (&str, &Path),
    scenario: &str,
    run: impl Fn(&T, &Path),
) {
    let mut failed = Vec::new();
    for interpreter in interpreters {
        let (label, path) = describe(interpreter);
        eprintln!("=== {scenario} on {label} ({})", path.display());
        let dir = scratch_dir(&format!("{}-{scenario}-{label}", runtime.to_lowercase()));
        let _shared = beside_others();
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(interpreter, &dir))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let first_line: String = message.lines().next().unwrap_or("").chars().take(300).collect();
            failed.push(format!("{label}: {first_line}"));
        }
    }
    assert!(failed.is_empty(), "{scenario} failed on {} {runtime}(s):\n{}", failed.len(), failed.join("\n"));
}

/// `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded -p PID` of
/// `INTERPRETER SCRIPT` started first and running longer than the recording (the script prints
/// `main TID` first, once it runs its own code): the profiler reads the interpreter's records
/// from the live process as samples arrive, and a busy test machine can hold it up past the end
/// of a script that stops with the recording. 499 Hz for the shares' sampling error, as in the
/// Python tests.
pub fn record_attached_to_script(
    dir: &Path,
    interpreter: &ScriptRunner,
    script: &Path,
    seconds: &str,
    extra: &[&str],
) -> python::Recorded {
    let out = dir.join("out.folded");
    let mut child = KillOnDrop(
        interpreter
            .command()
            .arg(script)
            .arg(outliving(seconds))
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the script"),
    );
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    // Its first line says it runs its own code.
    let mut announced = String::new();
    stdout.read_line(&mut announced).unwrap();
    let pid = child.pid().to_string();
    let mut args = vec!["record", "--per-thread", "-F", "499", "-d", seconds, "-o", out.to_str().unwrap()];
    args.extend(extra);
    args.extend(["-p", &pid]);
    let run = run_bounded(&args);
    drop(child);
    std::io::Read::read_to_string(&mut stdout, &mut announced).unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "the profiler failed: {stderr}");
    python::Recorded { folded: Folded::read(&out), threads: python::announced_threads(&announced), stderr }
}

/// How long a script runs that must outlive a recording of `seconds`.
fn outliving(seconds: &str) -> String {
    format!("{}", seconds.parse::<f64>().unwrap() + 60.0)
}

/// [`record_attached_to_script`] with the script started by the profiler, from its first
/// instruction: `profiler record --per-thread -F 499 -d SECONDS [extra] -o <dir>/out.folded --
/// INTERPRETER [ARGS] SCRIPT`. The profiler runs the command in its own environment, which is
/// given the interpreter's; the script outlives the recording as there, and is killed with the
/// profiler's process group once the recording is written.
pub fn record_script_from_start(
    dir: &Path,
    interpreter: &ScriptRunner,
    script: &Path,
    seconds: &str,
    extra: &[&str],
) -> python::Recorded {
    let out = dir.join("out.folded");
    // The script's standard output (the profiler writes none to it): a file, which the script
    // goes on writing after the profiler has ended.
    let (stdout, stderr) = (dir.join("stdout"), dir.join("profiler.stderr"));
    let mut args = vec!["record", "--per-thread", "-F", "499", "-d", seconds, "-o", out.to_str().unwrap()];
    args.extend(extra);
    args.push("--");
    eprintln!(
        "profiler {args:?} {} {:?} {}",
        interpreter.program.display(),
        interpreter.args,
        script.display()
    );
    let mut command = profiler();
    command
        .args(&args)
        .arg(interpreter.program)
        .args(interpreter.args)
        .arg(script)
        .arg(outliving(seconds))
        .envs(interpreter.env.iter().map(|(name, value)| (name, value)))
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap())
        .process_group(0);
    let mut group = GroupKilledOnDrop(command.spawn().expect("start the profiler"));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds.parse().unwrap()) + ENDS_WITHIN;
    let status = loop {
        if let Some(status) = group.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the profiler did not end within {ENDS_WITHIN:?} of its -d");
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(group);
    let stderr = std::fs::read_to_string(stderr).unwrap();
    eprintln!("profiler: {status}\n{stderr}");
    assert!(status.success(), "the profiler failed: {stderr}");
    let announced = std::fs::read_to_string(stdout).unwrap();
    python::Recorded { folded: Folded::read(&out), threads: python::announced_threads(&announced), stderr }
}

/// A process started in a process group of its own, which is killed (with what it started, a
/// script that outlives it, a server's workers included) when the test ends, pass or fail.
pub struct GroupKilledOnDrop(pub Child);

impl Drop for GroupKilledOnDrop {
    fn drop(&mut self) {
        // The group's id is the child's pid, which is not given to another process while the
        // group has a member: the child, or the script that outlives it.
        // SAFETY: kill(2) has no memory preconditions.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}
