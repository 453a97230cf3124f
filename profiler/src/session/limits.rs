//! The limit on open files. The profiler keeps a file open per module it has seen (so that a
//! module still names its frames once its process exited or its file was deleted), so a
//! system-wide recording needs more than the usual soft limit of 1024.
use rustix::process::{Resource, getrlimit, setrlimit};

/// Open files below which a recording may run short.
const ENOUGH_OPEN_FILES: u64 = 16 * 1024;

/// Raises the soft limit on open files to the hard one. Returns a warning when that is still
/// low.
pub(super) fn raise_open_files() -> Option<String> {
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        // Not fatal: the recording runs with the files it has, and says so if they run out.
        let _ = setrlimit(Resource::Nofile, limit);
    }
    let open_files = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    (open_files < ENOUGH_OPEN_FILES).then(|| {
        format!(
            "the limit on open files is {open_files} ({}): a long or system-wide recording may run short of them \
             (raise it with `ulimit -Hn`)",
            describe_open_files()
        )
    })
}

/// The soft limit on open files now.
pub(super) fn open_files() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// `RLIMIT_NOFILE soft N, hard M`.
pub(super) fn describe_open_files() -> String {
    let limit = getrlimit(Resource::Nofile);
    let show = |value: Option<u64>| value.map_or("unlimited".to_owned(), |n| n.to_string());
    format!("RLIMIT_NOFILE soft {}, hard {}", show(limit.current), show(limit.maximum))
}
