//! Processes and threads by the kernel's numbers, as distinct types: a thread-group id and a
//! thread id are both `u32` to the kernel, and one passed for the other would go unnoticed.

/// A process: its thread-group id, in the kernel's (the initial) pid namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tgid(pub u32);

/// A thread: its id, in the kernel's (the initial) pid namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tid(pub u32);

impl std::fmt::Display for Tgid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for Tid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Tgid> for i64 {
    fn from(tgid: Tgid) -> Self {
        tgid.0.into()
    }
}

impl From<Tid> for i64 {
    fn from(tid: Tid) -> Self {
        tid.0.into()
    }
}

impl Tgid {
    /// The profiler's own process.
    pub fn own() -> Self {
        Self(std::process::id())
    }

    /// The process's main thread, whose id is the process's.
    pub fn main_thread(self) -> Tid {
        Tid(self.0)
    }
}
