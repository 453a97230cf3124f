//! What a machine (and a target's binaries) can do for profiling: the checks of `profiler
//! check`, and the blocking ones every session runs before anything else.
//!
//! Each check is one finding: OK, WARN or FAIL, what was checked, and what it means or what to
//! do. A session refuses to start on a failing blocking check.
use std::{fmt, fs, path::Path};

use anyhow::{Context as _, Result, bail};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use profiler_common::FramePointers;
use rustix::{
    process::{Resource, getrlimit},
    thread::{CapabilitySet, capabilities},
};

use crate::{
    address_space::{AddressSpaces, Backing, Mappings, Tracking},
    kernel::{
        KernelSource as _,
        names::KernelNamer,
        sampler::{OffCpuConfig, Sampler, SamplerConfig},
    },
    model::{Tgid, printable},
    runtimes::{Inspected, Runtimes},
    untrusted::{mounts, open, read_bounded},
    unwind::cfi::ModuleCfi,
};

const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
/// `bpf_task_pt_regs` (the user registers of a sample taken in kernel mode) came in 5.15.
const MIN_KERNEL: (u32, u32) = (5, 15);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Finding {
    pub status: Status,
    pub subject: String,
    pub detail: String,
}

impl Finding {
    fn new(status: Status, subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { status, subject: subject.into(), detail: detail.into() }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match self.status {
            Status::Ok => "OK  ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        };
        // Subjects and details name files of targets: shown escaped.
        write!(f, "{status}  {}: {}", printable(&self.subject), printable(&self.detail))
    }
}

/// The checks `record` (sampling at `frequency_hz`) or `leaks` (no sampling) cannot do without;
/// the first failure is the error.
pub(crate) fn blocking(frequency_hz: Option<u64>) -> Result<()> {
    let findings = [privileges(), btf(), kernel(&kernel_release())];
    for finding in findings.into_iter().chain(frequency_hz.map(sample_rate)) {
        if finding.status == Status::Fail {
            bail!("{}", finding.detail);
        }
    }
    Ok(())
}

/// Every check, and those of the given processes' binaries.
pub(crate) fn all(pids: &[u32]) -> Vec<Finding> {
    let privileged = privileges().status == Status::Ok;
    let mut findings = vec![
        kernel(&kernel_release()),
        btf(),
        privileges(),
        paranoid(privileged),
        memlock(),
        sample_rate(99),
        sampling(privileged),
        off_cpu(privileged),
        kernel_names(privileged),
    ];
    for &pid in pids {
        findings.extend(target(Tgid(pid)));
    }
    findings
}

fn kernel_release() -> String {
    rustix::system::uname().release().to_string_lossy().into_owned()
}

fn kernel(release: &str) -> Finding {
    let subject = format!("kernel {release}");
    let mut numbers = release.split(['.', '-']).map(|n| n.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (numbers.next(), numbers.next()) else {
        return Finding::new(
            Status::Warn,
            subject,
            "cannot read the version; profiler needs Linux 5.15 or later",
        );
    };
    if (major, minor) < MIN_KERNEL {
        return Finding::new(
            Status::Fail,
            subject,
            format!("profiler needs Linux 5.15 or later, this is {major}.{minor}"),
        );
    }
    if (major, minor) == (6, 16) || (major, minor) == (6, 17) {
        return Finding::new(
            Status::Warn,
            subject,
            "Linux 6.16 and 6.17 can freeze when a perf cpu-clock event uses event limits \
             (PERF_EVENT_IOC_REFRESH), as in-process profilers such as async-profiler did; profiler never \
             sets event limits and is not affected, but other perf-based tools may be",
        );
    }
    Finding::new(Status::Ok, subject, "perf cpu-clock sampling with eBPF, ring buffers and task registers")
}

fn btf() -> Finding {
    if Path::new(BTF_PATH).exists() {
        Finding::new(Status::Ok, "BTF", BTF_PATH)
    } else {
        Finding::new(
            Status::Fail,
            "BTF",
            format!(
                "kernel BTF not found at {BTF_PATH}: profiler needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
            ),
        )
    }
}

/// Loading BPF programs and opening system-wide perf events needs CAP_BPF and CAP_PERFMON (or
/// CAP_SYS_ADMIN, which implies both).
fn privileges() -> Finding {
    let caps = capabilities(None).map_or(CapabilitySet::empty(), |sets| sets.effective);
    if caps.contains(CapabilitySet::SYS_ADMIN) {
        Finding::new(Status::Ok, "privileges", "CAP_SYS_ADMIN (root)")
    } else if caps.contains(CapabilitySet::BPF | CapabilitySet::PERFMON) {
        Finding::new(Status::Ok, "privileges", "CAP_BPF and CAP_PERFMON")
    } else {
        Finding::new(
            Status::Fail,
            "privileges",
            "profiler needs root, or the CAP_BPF and CAP_PERFMON capabilities: run it with sudo",
        )
    }
}

fn paranoid(privileged: bool) -> Finding {
    let value = read_bounded("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    let subject = format!("kernel.perf_event_paranoid = {}", value.trim());
    if privileged {
        Finding::new(Status::Ok, subject, "does not apply with CAP_PERFMON")
    } else {
        Finding::new(Status::Warn, subject, "without CAP_PERFMON, system-wide perf events need it at -1")
    }
}

fn memlock() -> Finding {
    let value = match getrlimit(Resource::Memlock).current {
        None => "unlimited".to_owned(),
        Some(bytes) => format!("{} KiB", bytes / 1024),
    };
    Finding::new(
        Status::Ok,
        format!("RLIMIT_MEMLOCK = {value}"),
        "not used for BPF memory since Linux 5.11 (cgroup accounting)",
    )
}

/// The kernel refuses frequencies above `kernel.perf_event_max_sample_rate`.
fn sample_rate(hz: u64) -> Finding {
    let max = read_bounded("/proc/sys/kernel/perf_event_max_sample_rate")
        .and_then(|text| text.trim().parse::<u64>().ok());
    match max {
        Some(max) if hz > max => Finding::new(
            Status::Fail,
            "sample rate",
            format!(
                "-F {hz} is above the kernel's limit of {max} Hz (raise it with: sysctl kernel.perf_event_max_sample_rate={hz})"
            ),
        ),
        Some(max) => {
            Finding::new(Status::Ok, format!("kernel.perf_event_max_sample_rate = {max}"), "-F up to that")
        }
        None => Finding::new(Status::Warn, "sample rate", "cannot read kernel.perf_event_max_sample_rate"),
    }
}

/// Loads and verifies the eBPF program, creates its ring buffer and opens a cpu-clock event on
/// every CPU, then releases everything.
fn sampling(privileged: bool) -> Finding {
    let done = "eBPF program verified, ring buffer created, cpu-clock perf events opened on every CPU";
    try_sampler("sampling", privileged, true, None, done)
}

/// Loads and attaches the scheduler hooks of `record --off-cpu` and `--wall`, then releases them.
fn off_cpu(privileged: bool) -> Finding {
    let hooks = OffCpuConfig { min_ns: u64::MAX, runqueue: true };
    let done = "sched_switch (BTF tracepoint) and sys_exit (raw tracepoint) attached, the task iterator run";
    try_sampler("off-CPU", privileged, false, Some(hooks), done)
}

/// Has the kernel name an address, as naming does for kernel frames. Without it they are unnamed:
/// a warning.
fn kernel_names(privileged: bool) -> Finding {
    let subject = "kernel frames' names";
    if !privileged {
        return Finding::new(Status::Warn, subject, "not tried: needs the privileges above");
    }
    match KernelNamer::load().and_then(|mut namer| namer.name(&[0])) {
        Ok(_) => Finding::new(Status::Ok, subject, "the kernel names addresses (bpf_snprintf %pS)"),
        Err(err) => Finding::new(Status::Warn, subject, format!("kernel frames stay unnamed: {err:#}")),
    }
}

fn try_sampler(
    subject: &str,
    privileged: bool,
    on_cpu: bool,
    off_cpu: Option<OffCpuConfig>,
    done: &str,
) -> Finding {
    if !privileged {
        return Finding::new(Status::Fail, subject, "not tried: needs the privileges above");
    }
    let config = SamplerConfig {
        frequency_hz: 99,
        filter_processes: true,
        follow_forks: false,
        stack_copy_cap: 4096,
        frame_pointers: FramePointers::WhenCopyShort,
        ring_buffer_bytes: 1 << 20,
        on_cpu,
        off_cpu,
    };
    let result = Sampler::load(&config).and_then(|mut sampler| {
        sampler.start()?;
        if off_cpu.is_some() {
            // Runs the task iterator too, as the end of a recording does.
            sampler.unsent_off_cpu()?;
        }
        sampler.detach()
    });
    match result {
        Ok(()) => Finding::new(Status::Ok, subject, done),
        Err(err) => Finding::new(Status::Fail, subject, format!("{err:#}")),
    }
}

/// For each executable file of process `pid`: can its stacks be walked?
fn target(pid: Tgid) -> Vec<Finding> {
    let space = match Mappings::read(pid) {
        Ok(space) => space,
        Err(err) => {
            return vec![Finding::new(
                Status::Fail,
                format!("PID {pid}"),
                format!("cannot read its mappings: {err}"),
            )];
        }
    };
    let inspected = runtimes(pid);
    let mut seen = Vec::new();
    let mut findings = Vec::new();
    let namespace = mounts::Namespace::of(pid);
    for mapping in space.mappings().filter(|m| m.executable) {
        let Backing::File { path, .. } = &mapping.backing else { continue };
        if seen.contains(path) {
            continue;
        }
        seen.push(path.clone());
        // A runtime that reads its image's own tables steps what has no CFI there (Go's code).
        let read_by = inspected
            .iter()
            .find(|found| found.said.is_ok() && found.image.as_ref() == Some(path))
            .map(|found| found.runtime);
        findings.push(module(open::mapped_file(pid, None, mapping.at(), namespace.as_ref()), path, read_by));
    }
    findings.extend(inspected.into_iter().map(|found| match found.said {
        Ok(said) => Finding::new(Status::Ok, found.runtime, said),
        Err(why) => Finding::new(Status::Warn, found.runtime, format!("not read: {why}")),
    }));
    findings
}

/// What is read of the language runtimes process `pid` runs (their frames' layouts), as a
/// recording would read them.
fn runtimes(pid: Tgid) -> Vec<Inspected> {
    let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
    spaces.track(pid);
    let mut view = spaces.observe(pid, pid.main_thread(), "", crate::clock::monotonic_ns());
    Runtimes::new(false).inspect(&mut view)
}

/// What unwinding finds in the file mapped as `path` (opened as a recording would open it), whose
/// runtime, if one read it (`read_by`), steps its code.
fn module(file: std::io::Result<fs::File>, path: &Path, read_by: Option<&str>) -> Finding {
    let subject = path.display().to_string();
    let file = file.with_context(|| format!("cannot open {subject}"));
    let cfi = file
        .as_ref()
        .map_err(|err| anyhow::anyhow!("{err:#}"))
        .and_then(|file| ModuleCfi::load(file, None).with_context(|| subject.clone()))
        .map(|cfi| cfi.has_cfi());
    let data = file.ok().and_then(|mut file| {
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut data).ok().map(|_| data)
    });
    let frame_pointers = data.and_then(|data| frame_pointer_share(&data));
    let fp = match frame_pointers {
        Some(share) => format!("frame pointers in {:.0}% of functions", share * 100.0),
        None => "no function symbols to look for frame pointers".into(),
    };
    match cfi {
        Err(err) => Finding::new(Status::Warn, subject, format!("unreadable: {err:#}")),
        Ok(true) => Finding::new(Status::Ok, subject, format!("CFI for DWARF unwinding; {fp}")),
        Ok(false) if let Some(runtime) = read_by => {
            Finding::new(Status::Ok, subject, format!("no CFI, but {runtime} steps and names its code"))
        }
        Ok(false) if frame_pointers.is_some_and(|share| share >= 0.5) => {
            Finding::new(Status::Ok, subject, format!("no CFI, but {fp}"))
        }
        Ok(false) => {
            Finding::new(Status::Warn, subject, format!("no CFI and {fp}: stacks stop in this file"))
        }
    }
}

/// Share of the function symbols whose code starts with the frame-pointer prologue
/// (`push %rbp; mov %rsp,%rbp`, possibly after `endbr64`). GCC leaves leaf functions without
/// it even when building with frame pointers, so a share above half means "built with them".
pub(crate) fn frame_pointer_share(data: &[u8]) -> Option<f64> {
    const ENDBR64: &[u8] = &[0xf3, 0x0f, 0x1e, 0xfa];
    const PROLOGUE: &[u8] = &[0x55, 0x48, 0x89, 0xe5];
    let file = object::File::parse(data).ok()?;
    let text = file.section_by_name(".text")?;
    let (text_start, text_data) = (text.address(), text.data().ok()?);
    let symbols = if file.symbols().next().is_some() { file.symbols() } else { file.dynamic_symbols() };
    let (mut functions, mut with_fp) = (0usize, 0usize);
    for symbol in symbols.filter(|s| s.kind() == object::SymbolKind::Text && s.size() >= 8) {
        let Some(offset) = symbol.address().checked_sub(text_start) else { continue };
        let Some(code) = text_data.get(offset as usize..) else { continue };
        functions += 1;
        let code = code.strip_prefix(ENDBR64).unwrap_or(code);
        if code.starts_with(PROLOGUE) {
            with_fp += 1;
        }
    }
    (functions > 0).then(|| with_fp as f64 / functions as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel("6.18.44-fc").status, Status::Ok);
        assert_eq!(kernel("6.17.1-300.fc43.x86_64").status, Status::Warn);
        assert_eq!(kernel("6.16.0").status, Status::Warn);
        assert!(kernel("6.17.0").detail.contains("not affected"));
        assert_eq!(kernel("5.10.0").status, Status::Fail);
        assert_eq!(kernel("garbage").status, Status::Warn);
    }

    #[test]
    fn absurd_frequency_is_refused() {
        let finding = sample_rate(u64::MAX);
        assert_eq!(finding.status, Status::Fail);
        assert!(finding.detail.contains("above the kernel's limit"), "{finding}");
        assert_eq!(sample_rate(1).status, Status::Ok);
    }

    #[test]
    fn findings_print_on_one_line() {
        let finding = Finding::new(Status::Warn, "x", "y");
        assert_eq!(finding.to_string(), "WARN  x: y");
    }

    #[test]
    fn frame_pointers_of_fixture_binaries() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unwind");
        // Built with -fomit-frame-pointer.
        let share = frame_pointer_share(&fs::read(dir.join("snapshot")).unwrap()).unwrap();
        assert!(share < 0.2, "{share}");
        assert_eq!(
            module(fs::File::open(dir.join("snapshot")), &dir.join("snapshot"), None).status,
            Status::Ok
        );
        let no_cfi = |read_by| {
            module(fs::File::open(dir.join("snapshot-nocfi")), &dir.join("snapshot-nocfi"), read_by)
        };
        assert_eq!(no_cfi(None).status, Status::Warn, "{}", no_cfi(None));
        // A runtime that read the file steps its code (Go's, with no CFI).
        let stepped = no_cfi(Some("Go"));
        assert_eq!(stepped.status, Status::Ok, "{stepped}");
        assert!(stepped.to_string().contains("Go steps and names its code"), "{stepped}");
        assert!(frame_pointer_share(b"not elf").is_none());
    }
}
