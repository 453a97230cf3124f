//! Which service a process belongs to, and the labels every exported profile carries.
use std::collections::HashMap;

use crate::{model::Tgid, untrusted::read_bounded};

/// Names the service of each process: `--service-name` when given, else its systemd unit, else
/// its container, else its command name.
#[derive(Debug, Default)]
pub(crate) struct Services {
    fixed: Option<String>,
    /// By process, for the current window (pids are reused: forgotten at each window).
    known: HashMap<Tgid, String>,
}

impl Services {
    pub(crate) fn new(fixed: Option<String>) -> Self {
        Self { fixed, known: HashMap::new() }
    }

    pub(crate) fn of(&mut self, pid: Tgid, comm: &str) -> String {
        if let Some(fixed) = &self.fixed {
            return fixed.clone();
        }
        self.known
            .entry(pid)
            .or_insert_with(|| {
                if is_kernel_thread(pid) {
                    return KERNEL.into();
                }
                let cgroup = read_bounded(&format!("/proc/{pid}/cgroup")).unwrap_or_default();
                service_in_cgroup(&cgroup).unwrap_or_else(|| sanitized(comm))
            })
            .clone()
    }

    pub(crate) fn forget(&mut self) {
        self.known.clear();
    }
}

/// The service of kernel threads (kworkers and the like), whatever their names.
const KERNEL: &str = "kernel";
/// `PF_KTHREAD` in `/proc/PID/stat`'s flags.
const PF_KTHREAD: u64 = 0x0020_0000;

fn is_kernel_thread(pid: Tgid) -> bool {
    // The flags are the 9th field; the 2nd, the command name, may hold spaces and parentheses.
    let stat = read_bounded(&format!("/proc/{pid}/stat")).unwrap_or_default();
    let flags = stat.rsplit_once(')').and_then(|(_, fields)| fields.split_whitespace().nth(6));
    flags.and_then(|f| f.parse::<u64>().ok()).is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// The service a cgroup listing names: the innermost systemd `.service` unit, else a container
/// id (docker, containerd, CRI-O, podman; its first 12 hex digits, as `docker ps` shows it).
pub(crate) fn service_in_cgroup(cgroup: &str) -> Option<String> {
    // cgroup v2's line is `0::/path`; v1 lines name a controller between the colons.
    let paths = cgroup.lines().filter_map(|line| line.splitn(3, ':').nth(2));
    let components: Vec<&str> = paths.flat_map(|path| path.split('/')).collect();
    let unit = components.iter().rev().find_map(|c| c.strip_suffix(".service"));
    if let Some(unit) = unit.filter(|u| !u.starts_with("user@")) {
        return Some(sanitized(unit));
    }
    components.iter().rev().find_map(|c| container_id(c)).map(|id| id[..12].to_owned())
}

/// The 64-hex-digit container id in a cgroup path component: `docker-ID.scope`,
/// `cri-containerd-ID.scope`, `crio-ID.scope`, `libpod-ID.scope`, or the bare id.
fn container_id(component: &str) -> Option<&str> {
    let id = component.strip_suffix(".scope").unwrap_or(component);
    let id = id.rsplit('-').next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// A name as backends take it in label values: printable, without the characters that delimit
/// labels in Pyroscope's `name{key=value,...}`, at most 128 bytes.
pub(crate) fn sanitized(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_control() || matches!(c, '{' | '}' | ',' | '=' | '"') { '_' } else { c })
        .collect();
    let mut end = clean.len().min(128);
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    clean[..end].to_owned()
}

/// What every profile of this host says of it.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    pub name: String,
    pub kernel_release: String,
}

impl Host {
    pub(crate) fn this() -> Self {
        let uname = rustix::system::uname();
        Self {
            name: uname.nodename().to_string_lossy().into_owned(),
            kernel_release: uname.release().to_string_lossy().into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_from_cgroups() {
        assert_eq!(service_in_cgroup("0::/system.slice/nginx.service\n").as_deref(), Some("nginx"));
        let user_unit = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/backup.service\n";
        assert_eq!(service_in_cgroup(user_unit).as_deref(), Some("backup"));
        let id = "4f9c1e0a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6";
        let docker = format!("0::/system.slice/docker-{id}.scope\n");
        assert_eq!(service_in_cgroup(&docker).as_deref(), Some("4f9c1e0a2b3c"));
        let kubepods = format!("12:cpu,cpuacct:/kubepods/burstable/pod1/cri-containerd-{id}.scope\n");
        assert_eq!(service_in_cgroup(&kubepods).as_deref(), Some("4f9c1e0a2b3c"));
        assert_eq!(service_in_cgroup("0::/user.slice/user-0.slice/session-3.scope\n"), None);
        assert_eq!(service_in_cgroup("garbage"), None);
    }

    #[test]
    fn names_lose_label_delimiters() {
        assert_eq!(sanitized("a{b=c},d\"\n"), "a_b_c__d__");
        assert_eq!(sanitized(&"é".repeat(100)).len(), 128);
        let mut services = Services::new(Some("api".into()));
        assert_eq!(services.of(Tgid(1), "init"), "api");
    }

    #[test]
    fn kernel_threads_are_one_service() {
        // kthreadd is pid 2 on every Linux; this process is not a kernel thread.
        let mut services = Services::new(None);
        assert_eq!(services.of(Tgid(2), "kthreadd"), KERNEL);
        assert_ne!(services.of(Tgid::own(), "test"), KERNEL);
    }
}
